"""Who acts on a run and which build it belongs to, as read from the environment.

Both the run pipeline (:mod:`zuke._engine.run`, :mod:`zuke._engine.record`) and
``zuke cancel`` record them; they live here, apart from the engine, so that a
management command can name its actor without importing the scheduler.
"""

from __future__ import annotations

import getpass
from collections.abc import Mapping


def resolve_actor(explicit: str | None, env: Mapping[str, str]) -> str:
    """``--actor``, else ``ZUKE_ACTOR``, else ``GITHUB_ACTOR``, else the login name."""
    for candidate in (explicit, env.get("ZUKE_ACTOR"), env.get("GITHUB_ACTOR")):
        if candidate:
            return candidate
    try:
        return getpass.getuser() or "anonymous"
    except (OSError, KeyError):
        return "anonymous"


def build_origin(env: Mapping[str, str]) -> str | None:
    """The build a run belongs to across machines: ``ZUKE_BUILD_ID``, else ``GITHUB_REPOSITORY``."""
    return env.get("ZUKE_BUILD_ID") or env.get("GITHUB_REPOSITORY") or None


__all__ = ["build_origin", "resolve_actor"]
