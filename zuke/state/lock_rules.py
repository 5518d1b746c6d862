"""The rules of a cross-run lock, written once: expiry, renewal, release, fencing.

The memory, filesystem, ``zuke serve`` (SQLite) and branch stores keep a
:class:`ClaimState` per key in their own way and ask these pure functions
what the next state is. They take the store's clock reading and a fresh token
as arguments, so they do no I/O and are trivially testable.

The Postgres store (and ``zuke serve`` on Postgres) encodes the same rules in
SQL instead (:mod:`zuke.state._pg_locks`): each decision is one statement, so
that the database's row locks decide a race between processes on many hosts
and its clock (``clock_timestamp()``) every expiry — reading a claim into
Python to ask these functions would let two processes decide on the same
state. The shipped contract suite holds both to the same behaviour.

The rules:

* a claim is *live* while ``now < expires_at``; a free, released or expired
  key may be acquired, and that acquisition's fence is strictly greater than
  every fence the key ever had (``fence`` is the key's high-water mark and
  survives release);
* *expired is not abandoned*: the holder whose token still matches renews
  even past expiry, until somebody else acquires the key and replaces the
  token;
* a release by a token that no longer holds the key changes nothing;
* an operator may *break* a claim without its token (``zuke locks break``):
  it is released as by its holder, so the fence is kept and the next
  acquisition's is still greater, and the broken token can no longer renew.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuke.state.records import LockHolder

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: The longest TTL a lock may ask for, on every store: 366 days.
MAX_TTL_MS = 366 * 24 * 3600 * 1000


@dataclass(frozen=True)
class ClaimState:
    """A key's stored state: the current claim (if any) and the highest fence issued."""

    fence: int = 0
    holder: LockHolder | None = None
    token: str | None = None
    expires_at: int | None = None

    @property
    def claimed(self) -> bool:
        """Whether a claim is recorded (live or expired but not yet taken over)."""
        return self.token is not None

    def is_live(self, now_ms: int) -> bool:
        return self.token is not None and self.expires_at is not None and self.expires_at > now_ms


FREE = ClaimState()


@dataclass(frozen=True)
class Granted:
    """``acquire`` succeeded: store ``state``; its ``token`` and ``fence`` are the caller's."""

    state: ClaimState


@dataclass(frozen=True)
class Refused:
    """``acquire`` found a live claim held by ``holder``."""

    holder: LockHolder


def acquire(
    current: ClaimState | None,
    holder: LockHolder,
    ttl_ms: int,
    *,
    now_ms: int,
    token: str,
    fence_floor: int = 0,
) -> Granted | Refused:
    """Take the key unless a live claim holds it.

    ``fence_floor`` lets a store that forgot a key's state (a pruned run's
    lease) keep fences monotonic through a store-wide high-water mark.
    """
    state = current or FREE
    if state.is_live(now_ms):
        assert state.holder is not None
        return Refused(holder=state.holder)
    fence = max(state.fence, fence_floor) + 1
    return Granted(ClaimState(fence=fence, holder=holder, token=token, expires_at=now_ms + ttl_ms))


def renew(current: ClaimState | None, token: str, ttl_ms: int, *, now_ms: int) -> ClaimState | None:
    """The renewed state, or ``None`` when ``token`` no longer holds the key (refused)."""
    if current is None or not _holds(current, token):
        return None
    return ClaimState(
        fence=current.fence, holder=current.holder, token=token, expires_at=now_ms + ttl_ms
    )


def release(current: ClaimState | None, token: str) -> ClaimState | None:
    """The released state (fence kept), or ``None`` when ``token`` does not hold the key."""
    if current is None or not _holds(current, token):
        return None
    return ClaimState(fence=current.fence)


def break_claim(current: ClaimState | None) -> ClaimState | None:
    """The state with the claim removed (fence kept), or ``None`` when nothing is claimed."""
    if current is None or not current.claimed:
        return None
    return ClaimState(fence=current.fence)


def _holds(state: ClaimState, token: str) -> bool:
    # Constant-time: a token is a bearer credential on the HTTP service. hmac is
    # imported here: it loads OpenSSL (about 2 ms), which a listing never needs.
    import hmac

    return state.token is not None and hmac.compare_digest(state.token.encode(), token.encode())


__all__ = [
    "FREE",
    "MAX_TTL_MS",
    "ClaimState",
    "Granted",
    "Refused",
    "acquire",
    "break_claim",
    "release",
    "renew",
]
