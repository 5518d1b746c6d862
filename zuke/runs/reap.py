"""Reaping: what the sweep does with ``running`` and ``cancelling`` runs nobody drives.

A run whose process was killed stays ``running`` for ever, and anything it
owed (an effect above all) with it. The run's lease says whether anyone is
still there, and it is asked first, always:

* **the lease is held** — the run is merely slow: it is left alone, deadline
  or not (settling it would run its compensations beside the work they undo);
* **the lease can be taken** — its holder is gone. Under the lease, the run
  goes back to ``suspended`` with a ``reap`` event saying why, and the same
  sweep then resumes it (re-driving owed effects);
* **gone, and past** ``deadlineAt`` — it is settled ``failed``: it ran out of
  time, and whatever waits on it needs an answer. Settling is irreversible,
  so it also needs the build's graph to match the run's; handing a run back
  to ``suspended`` is reversible and asks only that the run is this build's.

A claim the gone holder took is never freed by the reaper: a run whose lock
is still within its TTL is left alone until it lapses (its holder may be
paused, not dead — the fail-closed rule covers a holder that runs, not one
that is frozen), and reaped by the sweep after. Its record then forgets the
lapsed claims, and the resumed run takes its locks again.

A run left ``cancelling`` by a process that died mid-walk has its walk
resumed — the compensations not yet recorded done run, none twice — and ends
``intendedTerminal`` (``cancelled`` if none was recorded); a run settled
``failed`` past its deadline gets its compensations the same way (the build
is loaded with the run's recorded parameters to run them).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from zuke._clock import has_passed, iso
from zuke._engine.held import rekey
from zuke._engine.resumed import plan_of
from zuke._engine.run import RunOptions
from zuke._errors import AlreadyResumedError, ZukeError
from zuke.runs.compensate import walk_taken
from zuke.runs.lifecycle import Hold, graph_drift, live_claims, load_for, take
from zuke.state._protocol import StateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord, RunStatus
from zuke.state.update import Updated

if TYPE_CHECKING:
    from zuke._build import Build

#: ``stopped``: the run's walk could not go on (another process holds it); ``unchanged``: a
#: lost race (the run moved meanwhile), which a sweep does not report
#: ``claims``: its holder is gone, but a lock it took is still within its TTL: left alone
#: until that lapses (the holder may be paused, not dead)
ReapAction = Literal["returned", "settled", "finished", "live", "claims", "stopped", "unchanged"]


@dataclass(frozen=True)
class Reaped:
    """What reaping did with one run; ``status`` is the run's status afterwards."""

    run_id: str
    action: ReapAction
    status: RunStatus
    detail: str


def past_deadline(record: RunRecord, now_ms: int) -> bool:
    """A malformed or absent ``deadlineAt`` is never past."""
    return has_passed(record.deadline_at, now_ms)


async def reap_run(
    build: type[Build],
    store: StateStore,
    run_id: str,
    *,
    run: RunOptions,
    actor: str,
    status: RunStatus,
) -> Reaped:
    """Reap one ``running`` or ``cancelling`` run if its holder is gone (``status``: as
    listed, for the report when the run is live).

    A ``cancelling`` run and a run past its deadline are settled with their
    compensation walk (:mod:`zuke.runs.compensate`); any other goes back to
    ``suspended``.
    """
    try:
        hold = await take(store, run_id, actor=actor, clock=run.clock, env=run.env,
                          held="held by {actor}: left alone", warn=run.on_warning)  # fmt: skip
    except AlreadyResumedError as exc:
        return Reaped(run_id, "live", status, str(exc))
    try:
        now_ms = run.clock.now_ms()
        # A run-held lock (held_until) is the run's, not a body's: the reaper adopts it.
        owned = {k: t for k, t in hold.record.locks.items() if k not in hold.record.held}
        live = await live_claims(store, run_id, owned, now_ms=now_ms)
        if live:
            keys = ", ".join(f"{k} (until {iso(t)})" for k, t in sorted(live.items()))
            return Reaped(
                run_id, "claims", hold.record.status,
                f"its holder is gone, but the lock it took is live: {keys}; left alone until "
                "it lapses (its holder may be paused, not dead). Free it sooner: zuke locks "
                "break KEY",
            )  # fmt: skip
        walked = await _walk_if_due(build, hold, run=run, actor=actor)
        if walked is not None:
            return walked
        return await _return_to_suspended(hold, actor=actor, now_ms=run.clock.now_ms())
    finally:
        await hold.release()


async def _walk_if_due(build: type[Build], hold: Hold, *, run: RunOptions, actor: str
                       ) -> Reaped | None:  # fmt: skip
    """Finish a ``cancelling`` run's walk, or settle a run past its deadline ``failed``
    with its compensations; ``None`` when neither applies."""
    record = hold.record
    now = iso(run.clock.now_ms())
    if record.status == "cancelling":
        final = record.intended_terminal or "cancelled"
        why = f"finished {final}: the process cancelling it was gone (its walk resumed)"
        intended: RunStatus = final
        action: ReapAction = "finished"
        reason = f"the run was {final}"
    elif record.status == "running" and past_deadline(record, run.clock.now_ms()):
        try:  # settling is irreversible: only with the build that has the run's graph
            loaded = load_for(build, record, run)
            if graph_drift(record, await plan_of(loaded, record)):
                return None
        except ZukeError:
            return None
        why = (
            f"settled failed with its compensations: its lease had lapsed and its deadline "
            f"({record.deadline_at}) passed"
        )
        intended, action = "failed", "settled"
        reason = "abandoned past the run's deadline"
    else:
        return None
    event = RunEvent(at=now, tool="reap", actor=actor, detail=why)
    result, _, _ = await walk_taken(hold, build=build, env=run.env, actor=actor,
                                    intended=intended, reason=reason, first=(event,))  # fmt: skip
    if result.stopped is not None:
        return Reaped(record.id, "stopped", result.status, result.stopped)
    return Reaped(record.id, action, result.status, why)


async def _return_to_suspended(hold: Hold, *, actor: str, now_ms: int) -> Reaped:
    """A ``running`` run whose holder is gone goes back to ``suspended``, for a resume.

    Its claims have lapsed (a live one keeps the run from being reaped at all), so
    the record forgets them and the resumed run takes its locks again.
    """
    run_id = hold.run_id
    now = iso(now_ms)
    why = "returned to suspended: its lease had lapsed (its process is gone)"

    # The run keeps its run-held locks (held_until), with a new token and fence each. The
    # hand-over revokes the gone owner's tokens: only on a lease proven now (a reaper that
    # stalled past its TTL may have lost the run to another reaper meanwhile).
    if hold.record.held:
        await hold.prove()
    rekeyed = await asyncio.to_thread(rekey, hold.store, hold.record, now_ms, actor=actor)
    fresh = {k: v for k, v in rekeyed.items() if v is not None}

    def change(record: RunRecord) -> RunDelta | None:
        if record.status != "running":  # e.g. marked cancelling meanwhile: the next sweep
            return None
        locks: dict[str, str | None] = dict.fromkeys(k for k in record.locks if k not in fresh)
        locks.update({k: token for k, (_, token) in fresh.items()})
        for key in record.held:  # a lock it could not keep: the old token, for the resume
            if key not in fresh and key in record.locks:
                locks.pop(key, None)
        return RunDelta(
            updated_at=now,
            status="suspended",
            locks=locks,
            held={k: row for k, (row, _) in fresh.items()},
            events=(RunEvent(at=now, tool="reap", actor=actor, detail=why),),
        )

    try:
        result = await hold.write(change)
    except BaseException:
        await _give_back(hold.store, fresh)
        raise
    if not isinstance(result, Updated):
        await _give_back(hold.store, fresh)
        return Reaped(run_id, "unchanged", result.record.status, "no longer running")
    return Reaped(run_id, "returned", "suspended", why)


async def _give_back(store: StateStore, fresh: Mapping[str, tuple[object, str]]) -> None:
    """The locks :func:`~zuke._engine.held.rekey` took, when the record could not say so."""
    for key, (_, token) in fresh.items():
        with contextlib.suppress(Exception):
            await asyncio.to_thread(store.release_lock, key, token)
