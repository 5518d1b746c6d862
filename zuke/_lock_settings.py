"""Authoring a cross-run lock: ``lock_key()`` and the settings ``.lock(configure)`` receives.

Settings are checked where they are set, so a bad key or TTL names itself.
The engine runs each ``configure`` twice: once when the build loads, against a
probe (:func:`check_lock`), so a setting that does not depend on run-time
values fails the load before any target runs; and again when the target
starts, to build the :class:`LockSpec` it acquires.

A lock key is stored in the clear and shown to every run that meets it, so a
key that contains a secret parameter's value is refused rather than hashed: a
hash of a short or guessable secret can be reversed, a refusal cannot.

``s.held_until(target)`` makes the lock the *run's*: kept past the body until
``target`` (downstream, checked at load by :func:`check_held_until`) has
finished, across any gate (see ``docs/locks.md``).

The TTL rules every claim follows (a lock, the run's lease) live here too, so
a TTL is refused where it is set: a holder that cannot renew stops what the
claim guards a *safety margin* before the TTL lapses
(:func:`safety_margin_ms`), so a TTL must leave time to renew before that.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zuke._duration import Duration, format_duration, parse_duration
from zuke._errors import BuildDefinitionError, DurationError
from zuke._redact import Redactor
from zuke.state._protocol import RESERVED_LOCK_PREFIXES, LockHolder

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: The least safety margin: the time a holder allows itself to stop (wake its heartbeat,
#: cancel async bodies, end its process and its children's) under any TTL.
MARGIN_FLOOR_MS = 500
#: The shortest TTL: the margin's floor plus as long again to renew in — a beat at half of
#: it and two retries, each a store round trip, all at least 62 ms apart.
MIN_TTL_MS = 1_000

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_SAFE_KEY = re.compile(r"[A-Za-z0-9._-]{1,200}")


def safety_margin_ms(ttl_ms: int) -> int:
    """How long before its TTL a holder that could not renew stops: 10 %, at least 0.5 s.

    The store's expiry is at least the last successful renewal's start plus the
    TTL, by the store's clock. 10 % covers a holder's clock running slow against
    the store's two hundred times over (NTP allows 0.05 %); the floor covers the
    time to stop.
    """
    return max(ttl_ms // 10, MARGIN_FLOOR_MS)


def check_claim_ttl(ttl_ms: int, what: str) -> int:
    """``ttl_ms`` if a holder can renew it safely, else a :class:`DurationError` naming ``what``."""
    if ttl_ms < MIN_TTL_MS:
        raise DurationError(
            f"{what}: {format_duration(ttl_ms)} is shorter than the {MIN_TTL_MS / 1000:g}s "
            "minimum: a holder renews within its TTL less a safety margin (10 %, at least "
            f"{MARGIN_FLOOR_MS / 1000:g}s) and stops when it cannot, so a shorter TTL leaves "
            "no time to renew"
        )
    return ttl_ms


def lock_key(*parts: str | int | float) -> str:
    """A filename-safe key: characters outside ``[A-Za-z0-9._-]`` become ``_``,
    empty parts are dropped, parts are joined with ``-``."""
    cleaned = (_sanitise(str(p)) for p in parts)
    return "-".join(p for p in cleaned if p)


def _sanitise(text: str) -> str:
    return _UNSAFE.sub("_", text)


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
    #: ``held_until(target)``: the run keeps the lock until this target has finished
    until: str | None = None

    def guidance(self, holder: LockHolder) -> str:
        if self.render is None:
            return default_guidance(self.key, holder)
        return str(self.render(holder))


class LockSettings:
    """What ``t.lock(lambda s: ...)`` configures."""

    def __init__(self, target: str, *, secrets: Redactor | None = None) -> None:
        self._target = target
        self._secrets = secrets or Redactor()
        self._key: str | None = None
        self._ttl_ms: int | None = None
        self._render: Callable[[LockHolder], str] | None = None
        self._until: str | None = None
        #: the error a setting raised (as opposed to one from the build's own code)
        self.failure: BaseException | None = None

    def _fail(self, message: str) -> BuildDefinitionError:
        self.failure = BuildDefinitionError(f"target {self._target!r}: {message}")
        return self.failure

    def _check_key(self, key: str) -> None:
        if self._secrets.reveals(key, normalise=_sanitise):
            raise self._fail(
                "the lock key contains the value of a secret parameter; lock keys are stored "
                "and shown to other runs in the clear, so build the key from non-secret values"
            )
        if key.lower().startswith(RESERVED_LOCK_PREFIXES):
            raise self._fail(
                f"lock key {key!r} starts with a prefix zuke reserves for its own claims "
                f"({', '.join(RESERVED_LOCK_PREFIXES)}); choose another key"
            )

    def lock_key(self, *parts: str | int | float) -> LockSettings:
        """Build the key from parts, sanitised (see :func:`zuke.lock_key`)."""
        key = lock_key(*parts)
        if not key:
            raise self._fail("lock_key() produced an empty key")
        self._check_key(key)
        self._key = key[:200]
        self._check_key(self._key)
        return self

    def key(self, literal: str) -> LockSettings:
        """Set the key as given; it must already be filename-safe."""
        if isinstance(literal, str):
            self._check_key(literal)
        if (
            not isinstance(literal, str)
            or not _SAFE_KEY.fullmatch(literal)
            or literal in (".", "..")
        ):
            raise self._fail(
                f"lock key {literal!r} is not filename-safe; use 1-200 characters from "
                "[A-Za-z0-9._-], or build it with lock_key(...) which sanitises"
            )
        self._key = literal
        return self

    def with_ttl(self, ttl: Duration) -> LockSettings:
        """How long the claim outlives a holder that stopped renewing (a killed process)."""
        what = f"target {self._target!r}: lock TTL"
        try:
            self._ttl_ms = check_claim_ttl(parse_duration(ttl, what=what), what)
        except DurationError as exc:
            self.failure = exc
            raise
        return self

    def on_conflict(self, render: Callable[[LockHolder], str]) -> LockSettings:
        """Render the guidance a loser sees, from the current holder."""
        if not callable(render):
            raise self._fail("on_conflict() needs a function")
        self._render = render
        return self

    def held_until(self, target: object) -> LockSettings:
        """Keep the lock after this target's body, until ``target`` has finished (success or
        failure), across any gate between: the run holds it, also while suspended."""
        name = target if isinstance(target, str) else getattr(target, "name", None)
        if not isinstance(name, str) or not name:
            raise self._fail(
                f"held_until() needs a target of this build (self.<target>), got {target!r}"
            )
        self._until = name
        return self

    def freeze(self) -> LockSpec:
        if self._key is None:
            raise self._fail("the lock sets no key; call s.lock_key(...) or s.key(...)")
        if self._ttl_ms is None:
            raise self._fail('the lock sets no TTL; call s.with_ttl("30m")')
        return LockSpec(key=self._key, ttl_ms=self._ttl_ms, render=self._render, until=self._until)


def check_held_until(target: str, until: str, deps: Mapping[str, Sequence[str]]) -> None:
    """``held_until`` names a target downstream of ``target`` (one that depends on it, maybe
    through others): the only kind that finishes after it, so the lock is released then."""
    if until not in deps:
        raise BuildDefinitionError(
            f"target {target!r}: held_until({until!r}) names no target of this build"
        )
    seen: set[str] = set()
    stack = [until]
    while stack:
        name = stack.pop()
        if name == target and name != until:
            return
        if name in seen:
            continue
        seen.add(name)
        stack.extend(deps.get(name, ()))
    raise BuildDefinitionError(
        f"target {target!r}: held_until({until!r}) must name a target that runs after "
        f"{target!r} (one that depends on it, directly or through others); {until!r} does not, "
        "so the lock could outlive nothing or be released before it was taken"
    )


def check_lock(
    target: str,
    configure: Callable[[LockSettings], Any],
    secrets: Redactor,
    deps: Mapping[str, Sequence[str]] | None = None,
) -> None:
    """Run ``configure`` against a probe when the build loads.

    An error a setting raises (a bad key or TTL, a missing one, a key holding
    a secret) is a definition error now, before any target runs. An error from
    the build's own code inside ``configure`` may depend on values only known
    when the target starts, so it is left to then.
    """
    probe = LockSettings(target, secrets=secrets)
    try:
        configure(probe)
    except Exception as exc:
        if exc is probe.failure:
            raise
        return
    spec = probe.freeze()
    if spec.until is not None and deps is not None:
        check_held_until(target, spec.until, deps)
