"""A store axis for the real-process races: the filesystem store, and Postgres.

The Step 5 and Step 9 races (eight resumers, concurrent sweeps, ``kill -9``
and reap) run against each store a build may name. On Postgres each test gets
a fresh database of the session's cluster (``pg_cluster``: its skip and CI
rules apply), named to every process by ``ZUKE_STATE``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.resume_support import fs_store
from zuke.state._protocol import StateStore

KINDS = ("fs", "postgres")
#: ``@STORE_AXIS`` on a test taking ``kind``: once per store
STORE_AXIS = pytest.mark.parametrize("kind", KINDS)


@dataclass(frozen=True)
class AxisStore:
    """The store the test reads, and the environment that names it to a ``zuke`` process."""

    store: StateStore
    env: dict[str, str]

    def with_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        return {**self.env, **(extra or {})}


def axis_store(kind: str, workdir: Path, request: pytest.FixtureRequest) -> AxisStore:
    """The ``kind`` store for a build in ``workdir`` (Postgres: a fresh database)."""
    if kind == "fs":
        return AxisStore(fs_store(workdir), {})
    from zuke.state.postgres import PostgresStateStore

    url = request.getfixturevalue("pg_cluster").create_database()
    store = PostgresStateStore(url)
    request.addfinalizer(store.close)
    return AxisStore(store, {"ZUKE_STATE": url})
