"""``zuke locks``: see who holds which lock, and break a claim whose holder is stuck.

:func:`list_locks` is the store's ``list_locks()`` with each claim's lapse judged
by a clock. :func:`break_lock` removes a claim without its token, which is an
override of the lock's one-holder rule, so it is guarded:

* refused while the holder's run lease (``zuke-run-<run id>``) is live —
  that process is still running and would overlap with the next holder —
  unless ``force``;
* refused while the holder's run keeps the claim (``held_until``) and has not
  ended — a suspended run has no live lease, yet still needs the lock —
  unless ``force`` (the key stays in the run's ``heldLocks``, so its resume
  finds the lock gone and fails rather than go on unguarded);
* the reason is recorded in the holder run's audit trail (a ``locks-break``
  event naming the actor, the key and the reason) and the key leaves the
  run's ``locks``, so a later ``zuke cancel`` does not try to release it;
* the store keeps the key's fence, so the next acquisition's fence is
  strictly greater and a system fencing on it rejects the broken holder.

Liveness is judged from the lease's ``expiresAt`` (the store's clock) against
``clock``: on an HTTP store the two clocks differ by whatever skew the hosts
have, which a lease TTL of a minute dwarfs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._errors import LockError, RunNotFoundError, StateError, UnsafeIdError, UsageError
from zuke.state._ids import check_id
from zuke.state._protocol import RESERVED_LOCK_PREFIXES as RESERVED
from zuke.state._protocol import LockEntry, StateStore, lease_key
from zuke.state.naming import store_name
from zuke.state.records import TERMINAL_STATUSES, LockHolder, RunDelta, RunEvent, RunRecord
from zuke.state.update import GaveUp, update_run


class LockHolderLiveError(LockError):
    """``zuke locks break`` without ``--force`` found the holder's run lease live."""


@dataclass(frozen=True)
class RunHeld:
    """A claim its run keeps past its target (``held_until``), and where that run is."""

    run_status: str
    #: the gates the run waits at, when it is suspended
    gates: tuple[str, ...]
    #: the target after which the run gives it back
    until: str
    #: since when the run is suspended (``None``: it is not)
    parked_at: str | None = None

    @property
    def suspended(self) -> bool:
        return self.run_status == "suspended"

    def describe(self) -> str:
        if self.suspended:
            gates = ", ".join(f"`{g}`" for g in self.gates) or "a gate"
            return f"suspended at gate {gates} since {self.parked_at}, until `{self.until}`"
        return f"{self.run_status}, until `{self.until}`"


@dataclass(frozen=True)
class ListedLock:
    """One unreleased claim and whether it has lapsed by the caller's clock."""

    entry: LockEntry
    lapsed: bool
    #: set when the holder's run keeps the claim (``held_until``)
    held: RunHeld | None = None


def run_held(store: StateStore, key: str, run_id: str) -> RunHeld | None:
    """Whether run ``run_id`` keeps ``key`` (``held_until``), read from its record."""
    try:
        found = store.get_run(run_id)
    except (StateError, UnsafeIdError):
        return None
    if found is None or key not in found.record.held:
        return None
    record = found.record
    gates = tuple(sorted(n for n, row in record.targets.items() if row.status == "waiting"))
    parked = (record.parked_at or record.updated_at) if record.status == "suspended" else None
    return RunHeld(record.status, gates, record.held[key].until, parked)


@dataclass(frozen=True)
class BreakResult:
    """What :func:`break_lock` did."""

    key: str
    #: the holder removed; ``None`` when nothing held the key
    holder: LockHolder | None
    #: whether the break was recorded in the holder run's audit trail
    recorded: bool = False
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.holder is None:
            return f'Lock "{self.key}" was not held; nothing to break.'
        line = f'Broke lock "{self.key}" held by {self.holder.actor} (run {self.holder.run_id}).'
        if self.recorded:
            line += f" Recorded in run {self.holder.run_id}'s audit trail."
        return line


def list_locks(store: StateStore, *, clock: Clock = SYSTEM_CLOCK) -> list[ListedLock]:
    """Every claim not released, sorted by key, each marked lapsed or not."""
    now = clock.now_ms()
    return [
        ListedLock(
            entry=e,
            lapsed=e.expires_at <= now,
            held=None if e.key.startswith(RESERVED) else run_held(store, e.key, e.holder.run_id),
        )
        for e in store.list_locks()
    ]


def break_lock(
    store: StateStore,
    key: str,
    *,
    reason: str,
    actor: str,
    force: bool = False,
    clock: Clock = SYSTEM_CLOCK,
) -> BreakResult:
    """Remove ``key``'s claim without its token; see the module docstring for the guards."""
    check_id(key, "lock key")
    if not reason.strip():
        raise UsageError("--reason must say why the lock is broken (it is recorded)")
    breaker = getattr(store, "break_lock", None)
    if not callable(breaker):
        raise StateError(
            f"state: the store {store_name(store)} cannot break locks (it has no "
            "break_lock); free the key with the store's own tools"
        )
    entries = {e.key: e for e in store.list_locks()}
    claim = entries.get(key)
    if claim is None:
        return BreakResult(key=key, holder=None)
    kept = None if key.startswith(RESERVED) else run_held(store, key, claim.holder.run_id)
    if not force and kept is not None and kept.run_status not in TERMINAL_STATUSES:
        raise LockHolderLiveError(
            f'lock "{key}" is kept by run {claim.holder.run_id} ({kept.describe()}): the run '
            "still needs it, and breaking it lets another run change what it guards before "
            f"then (the run then fails when it resumes); cancel that run instead (zuke cancel "
            f"{claim.holder.run_id}), or pass --force"
        )
    lease = entries.get(lease_key(claim.holder.run_id))
    if not force and lease is not None and lease.expires_at > clock.now_ms():
        raise LockHolderLiveError(
            f'lock "{key}" is held by {claim.holder.actor} (run {claim.holder.run_id}), whose '
            "run is alive (its lease is live); cancel that run instead (zuke cancel "
            f"{claim.holder.run_id}), or pass --force, which lets two holders overlap"
        )
    holder = cast("Callable[[str], LockHolder | None]", breaker)(key)
    if holder is None:
        return BreakResult(key=key, holder=None)
    recorded, warnings = _record(store, key, holder, reason=reason, actor=actor, clock=clock)
    return BreakResult(key=key, holder=holder, recorded=recorded, warnings=warnings)


def _record(
    store: StateStore, key: str, holder: LockHolder, *, reason: str, actor: str, clock: Clock
) -> tuple[bool, list[str]]:
    """Append the ``locks-break`` event to the holder's run; whether it landed, and warnings."""

    def change(record: RunRecord) -> RunDelta:
        now = iso(clock.now_ms())
        event = RunEvent(
            at=now,
            tool="locks-break",
            actor=actor,
            args={"key": key, "reason": reason},
            detail=f'lock "{key}" broken by {actor}: {reason}',
        )
        locks: dict[str, str | None] = {key: None} if key in record.locks else {}
        return RunDelta(updated_at=now, events=(event,), locks=locks)

    run_id = holder.run_id
    try:
        outcome = update_run(store, run_id, change)
    except (RunNotFoundError, UnsafeIdError):
        return False, [f"the holder's run {run_id} is not in the store; the break is not recorded"]
    if isinstance(outcome, GaveUp):
        return False, [f"could not record the break in run {run_id} (conflicting writes)"]
    return True, []


__all__ = [
    "BreakResult",
    "ListedLock",
    "LockHolderLiveError",
    "RunHeld",
    "break_lock",
    "list_locks",
    "run_held",
]
