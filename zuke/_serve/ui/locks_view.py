"""The locks page, as values: every claim not released, and why a run keeps the ones it keeps.

The lock listing gives key, holder, expiry (the database's clock) and fence,
never a token. A lock a run keeps past its target (``held_until``) is in the
holder run's record (``heldLocks``): that record is read once per holding run
to say so, and to name the gates the run waits at meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass

from zuke._errors import CorruptRecordError, UnsafeIdError
from zuke._serve.backend import ServeDb
from zuke.state._ids import check_id
from zuke.state._protocol import RUN_LEASE_PREFIX, LockEntry
from zuke.state.wire import loads_record

#: holder runs whose record is read for one page, at most (beyond: no held-until note)
MAX_RECORDS = 200


@dataclass(frozen=True)
class LockRow:
    entry: LockEntry
    expired: bool
    role: str  #: "a run's lease", "held until publish has finished", "a target's lock"
    held_until: bool
    #: the gates the holding run waits at now (its ``heldLocks`` keep this lock meanwhile)
    gates: tuple[str, ...]


def lock_rows(db: ServeDb, ns: str, *, now_ms: int) -> list[LockRow]:
    entries = db.locks.list(ns)
    held: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
    for run_id in dict.fromkeys(e.holder.run_id for e in entries if _is_target_lock(e)):
        if len(held) >= MAX_RECORDS:
            break
        held[run_id] = _held_by(db, ns, run_id)
    rows = []
    for e in entries:
        until, gates = held.get(e.holder.run_id, ({}, ()))
        if e.key == RUN_LEASE_PREFIX + e.holder.run_id:
            role, keeps = "a run's lease", False
        elif e.key in until:
            role, keeps = f"held until {until[e.key]} has finished", True
        else:
            role, keeps = "a target's lock", False
        rows.append(LockRow(entry=e, expired=e.expires_at <= now_ms, role=role, held_until=keeps,
                            gates=gates if keeps else ()))  # fmt: skip
    return rows


def _is_target_lock(entry: LockEntry) -> bool:
    return not entry.key.startswith(RUN_LEASE_PREFIX)


def is_safe_id(value: str) -> bool:
    try:
        check_id(value)
    except UnsafeIdError:
        return False
    return True


def _held_by(db: ServeDb, ns: str, run_id: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """The run's run-held locks (key -> until) and the gates it waits at."""
    if not is_safe_id(run_id):  # a holder is descriptive: any text, never a key to read
        return {}, ()
    try:
        stored = db.get_run(ns, run_id)  # (a journal that does not fold raises here)
        record = None if stored is None else loads_record(stored.text)
    except CorruptRecordError:  # shown without the note; the run's page says what is wrong
        return {}, ()
    if record is None:
        return {}, ()
    until = {key: h.until for key, h in record.held.items()}
    gates = tuple(n for n, t in record.targets.items() if t.status == "waiting")
    return until, gates


__all__ = ["LockRow", "is_safe_id", "lock_rows"]
