"""Who acts on a run and which build it belongs to, as read from the environment.

Both the run pipeline (:mod:`zuke._engine.run`, :mod:`zuke._engine.record`) and
``zuke cancel`` record them; they live here, apart from the engine, so that a
management command can name its actor without importing the scheduler.

An actor is a name and where it came from (:class:`Actor`). Only a name that
GitHub Actions put in the environment is a GitHub login zuke may trust
(``"github"``); ``--actor``, ``ZUKE_ACTOR`` and the OS user are names anyone
can type (``"local"``). The run's *starter* is recorded once, with its source
(the record's ``actor`` and ``actorSource``); every later process that moves
the run records its own actor in its event, never over the starter.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, NamedTuple

#: where an actor's name came from (the record's ``actorSource``)
ActorSource = Literal["github", "local"]
ACTOR_SOURCES: tuple[ActorSource, ...] = ("github", "local")


class Actor(NamedTuple):
    """A name and where it came from."""

    name: str
    source: ActorSource


def _os_user() -> str:
    """``getpass.getuser()``'s answer, without importing ``getpass`` (which loads
    ``termios`` for its prompts): the first of its variables set, else the password
    database's name for this user."""
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        user = os.environ.get(name)
        if user:
            return user
    try:
        import pwd

        return pwd.getpwuid(os.getuid())[0] or "anonymous"
    except (ImportError, OSError, KeyError):
        return "anonymous"


def resolve(explicit: str | None, env: Mapping[str, str]) -> Actor:
    """``--actor``, else ``ZUKE_ACTOR``, else — under GitHub Actions (``GITHUB_ACTIONS=true``)
    — ``GITHUB_TRIGGERING_ACTOR`` (who started or re-ran the workflow run), else
    ``GITHUB_ACTOR``, else the OS user. Outside GitHub Actions a ``GITHUB_*`` variable is
    anybody's to set, so it names nobody."""
    for candidate in (explicit, env.get("ZUKE_ACTOR")):
        if candidate:
            return Actor(candidate, "local")
    if env.get("GITHUB_ACTIONS") == "true":
        for name in ("GITHUB_TRIGGERING_ACTOR", "GITHUB_ACTOR"):
            login = env.get(name)
            if login:
                return Actor(login, "github")
    return Actor(_os_user(), "local")


def resolve_actor(explicit: str | Actor | None, env: Mapping[str, str]) -> str:
    """The name :func:`resolve` finds (what a process records in its events); an
    :class:`Actor` already resolved is its own name."""
    if isinstance(explicit, Actor):
        return explicit.name
    return resolve(explicit, env).name


def build_origin(env: Mapping[str, str]) -> str | None:
    """The build a run belongs to across machines: ``ZUKE_BUILD_ID``, else ``GITHUB_REPOSITORY``."""
    return env.get("ZUKE_BUILD_ID") or env.get("GITHUB_REPOSITORY") or None


__all__ = ["ACTOR_SOURCES", "Actor", "ActorSource", "build_origin", "resolve", "resolve_actor"]
