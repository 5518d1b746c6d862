"""Lock decisions on the state branch: :mod:`zuke.state.lock_rules` applied to ``locks.json``.

Each function looks at a :class:`~zuke_gh._branch_view.View` (the branch at one
head, and GitHub's clock when that head was read) and returns a
:class:`~zuke_gh._branch_view.Step`: the answer, and the new ``locks.json`` to
commit on that head for it to hold. The store commits it with the head's
compare-and-swap, so a decision taken on a head that moved is re-taken.

GitHub's clock comes from the ``Date`` header, which has whole seconds: the
true time is in ``[D, D + 1 s)``. Expiry is judged at ``D`` (a claim is taken
over only once it has certainly expired) and a claim is granted or renewed
until ``D + 1 s + ttl`` (never shorter than the holder asked for). A claim
may thus live up to a second longer than its TTL, never shorter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TypeVar

from zuke.state import lock_rules
from zuke.state._protocol import RUN_LEASE_PREFIX, LockAcquired, LockHeld, LockHolder
from zuke.state.lock_rules import ClaimState
from zuke_gh._branch_files import LOCKS_PATH, LockFile, locks_bytes
from zuke_gh._branch_view import Step, View

T = TypeVar("T")

#: The resolution of GitHub's ``Date`` header.
DATE_RESOLUTION_MS = 1000


def acquire(
    view: View, key: str, holder: LockHolder, ttl_ms: int, token: str
) -> Step[LockAcquired | LockHeld]:
    current = view.locks.claims.get(key)
    outcome = lock_rules.acquire(
        current,
        holder,
        ttl_ms,
        now_ms=view.clock_ms(),
        token=token,
        fence_floor=view.locks.fence_floor,
    )
    if isinstance(outcome, lock_rules.Refused):
        return Step(LockHeld(holder=outcome.holder))
    state = outcome.state
    assert state.expires_at is not None
    state = replace(state, expires_at=state.expires_at + DATE_RESOLUTION_MS)
    if current is not None and current.holder is not None and current.claimed:
        verb = f"taken over by {holder.actor} (expired, held by {current.holder.actor})"
    else:
        verb = f"acquired by {holder.actor}"
    return _write(
        view,
        key,
        state,
        LockAcquired(token=token, fence=state.fence),
        f"lock {key}: {verb} (fence {state.fence})",
    )


def renew(view: View, key: str, token: str, ttl_ms: int) -> Step[bool]:
    current = view.locks.claims.get(key)
    renewed = lock_rules.renew(current, token, ttl_ms, now_ms=view.clock_ms() + DATE_RESOLUTION_MS)
    if renewed is None:
        return Step(False)
    actor = renewed.holder.actor if renewed.holder else "?"
    return _write(view, key, renewed, True, f"lock {key}: renewed by {actor}")


def release(view: View, key: str, token: str) -> Step[None]:
    current = view.locks.claims.get(key)
    released = lock_rules.release(current, token)
    if released is None or current is None:
        return Step(None)
    actor = current.holder.actor if current.holder else "?"
    message = f"lock {key}: released by {actor}"
    if key.startswith(RUN_LEASE_PREFIX):
        # a run's lease is taken once per process of the run: forget it, keeping its fence in
        # the floor, so locks.json does not grow with the runs ever made
        forgotten = forget(view.locks, key, now_ms=0, live_too=True)
        assert forgotten is not None
        data = locks_bytes(compact(forgotten))
        return Step(None, {LOCKS_PATH: data}, message=message)
    return _write(view, key, released, None, message)


def break_claim(view: View, key: str) -> Step[LockHolder | None]:
    current = view.locks.claims.get(key)
    broken = lock_rules.break_claim(current)
    if broken is None or current is None or current.holder is None:
        return Step(None)
    message = f"lock {key}: broken (was held by {current.holder.actor})"
    return _write(view, key, broken, current.holder, message)


def forget(locks: LockFile, key: str, now_ms: int, *, live_too: bool = False) -> LockFile | None:
    """``locks`` without ``key`` (a deleted run's lease) unless a live claim holds it.

    The key's fence moves into the store-wide floor, so fences never go back.
    ``None`` when there is nothing to forget.
    """
    state = locks.claims.get(key)
    if state is None or (state.is_live(now_ms) and not live_too):
        return None
    claims = {k: v for k, v in locks.claims.items() if k != key}
    return LockFile(claims=claims, fence_floor=max(locks.fence_floor, state.fence))


def _write(view: View, key: str, state: ClaimState, result: T, message: str) -> Step[T]:
    claims = dict(view.locks.claims)
    claims[key] = state
    data = locks_bytes(compact(LockFile(claims=claims, fence_floor=view.locks.fence_floor)))
    return Step(result, additions={LOCKS_PATH: data}, message=message)


def compact(locks: LockFile) -> LockFile:
    """``locks`` without released run leases (a first-layout ``locks.json`` kept one per run
    ever made), their fences moved into the floor: fences never go back."""
    gone = [k for k, c in locks.claims.items() if k.startswith(RUN_LEASE_PREFIX) and not c.claimed]
    if not gone:
        return locks
    floor = max([locks.fence_floor, *(locks.claims[k].fence for k in gone)])
    kept = {k: c for k, c in locks.claims.items() if k not in gone}
    return LockFile(claims=kept, fence_floor=floor)
