"""Authoring a cross-run lock: ``lock_key()`` and the settings ``.lock(configure)`` receives."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from zuke._duration import Duration, parse_duration
from zuke._errors import BuildDefinitionError
from zuke.state._protocol import LockHolder

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_SAFE_KEY = re.compile(r"[A-Za-z0-9._-]{1,200}")


def lock_key(*parts: str | int | float) -> str:
    """A filename-safe key: characters outside ``[A-Za-z0-9._-]`` become ``_``,
    empty parts are dropped, parts are joined with ``-``."""
    cleaned = (_UNSAFE.sub("_", str(p)) for p in parts)
    return "-".join(p for p in cleaned if p)


def default_guidance(key: str, holder: LockHolder) -> str:
    where = f" — {holder.run_url}" if holder.run_url else ""
    return (
        f'Lock "{key}" is held by {holder.actor} (run {holder.run_id}) since {holder.since}'
        f"{where}. Wait for that run to finish, or stop it (zuke cancel {holder.run_id}), "
        "then retry."
    )


@dataclass(frozen=True)
class LockSpec:
    """A lock as configured for one run."""

    key: str
    ttl_ms: int
    render: Callable[[LockHolder], str] | None

    def guidance(self, holder: LockHolder) -> str:
        if self.render is None:
            return default_guidance(self.key, holder)
        return str(self.render(holder))


class LockSettings:
    """What ``t.lock(lambda s: ...)`` configures."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._key: str | None = None
        self._ttl_ms: int | None = None
        self._render: Callable[[LockHolder], str] | None = None

    def lock_key(self, *parts: str | int | float) -> LockSettings:
        """Build the key from parts, sanitised (see :func:`zuke.lock_key`)."""
        key = lock_key(*parts)
        if not key:
            raise BuildDefinitionError(f"target {self._target!r}: lock_key() produced an empty key")
        self._key = key[:200]
        return self

    def key(self, literal: str) -> LockSettings:
        """Set the key as given; it must already be filename-safe."""
        if (
            not isinstance(literal, str)
            or not _SAFE_KEY.fullmatch(literal)
            or literal in (".", "..")
        ):
            raise BuildDefinitionError(
                f"target {self._target!r}: lock key {literal!r} is not filename-safe; use 1-200 "
                "characters from [A-Za-z0-9._-], or build it with lock_key(...) which sanitises"
            )
        self._key = literal
        return self

    def with_ttl(self, ttl: Duration) -> LockSettings:
        """How long the claim outlives a holder that stopped renewing (a killed process)."""
        self._ttl_ms = parse_duration(ttl, what=f"target {self._target!r}: lock TTL")
        return self

    def on_conflict(self, render: Callable[[LockHolder], str]) -> LockSettings:
        """Render the guidance a loser sees, from the current holder."""
        if not callable(render):
            raise BuildDefinitionError(f"target {self._target!r}: on_conflict() needs a function")
        self._render = render
        return self

    def freeze(self) -> LockSpec:
        if self._key is None:
            raise BuildDefinitionError(
                f"target {self._target!r}: the lock sets no key; call s.lock_key(...) or s.key(...)"
            )
        if self._ttl_ms is None:
            raise BuildDefinitionError(
                f'target {self._target!r}: the lock sets no TTL; call s.with_ttl("30m")'
            )
        return LockSpec(key=self._key, ttl_ms=self._ttl_ms, render=self._render)
