"""The store run-management commands use: always on (``.zuke/runs`` by default)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from zuke.state.resolve import resolve_store

if TYPE_CHECKING:
    from zuke._build import Build
    from zuke.state._protocol import StateStore


def open_store(
    env: Mapping[str, str],
    *,
    build: type[Build] | None = None,
    cwd: Path | None = None,
    reading: bool = False,
) -> StateStore:
    """The build's ``state_store()`` if it has one, else the environment's, else ``.zuke/runs``
    (``reading``: a command that only reads a run; a ``ZUKE_STATE_DIR`` must exist)."""
    override = build().state_store() if build is not None else None
    store = resolve_store(override=override, env=env, required=True, cwd=cwd, reading=reading)
    assert store is not None  # required=True always yields a store
    return store
