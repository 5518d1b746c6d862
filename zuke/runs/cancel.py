"""``zuke cancel``: end a run from any process, never freeing a claim under a live holder.

Who owns the run decides what the canceller may do, and the run's lease
``zuke-run-<id>`` says who owns it:

* **The lease is held** — a live process runs it. The canceller only marks
  the record ``cancelling`` (``intendedTerminal: cancelled``) with a
  compare-and-swap. The owner watches its record, sees the mark, tells its
  bodies to stop, waits for them, releases its own locks and records the run
  ``cancelled`` (exit 130). The canceller waits for that, up to ``wait_ms``.
  Releasing the owner's claims instead — as this module once did — let a
  second deploy take the lock while the first body still ran.
* **The lease can be taken** — the holder is demonstrably gone (killed, or
  paused past its TTL: it will find its next renewal refused and stop without
  writing). The canceller takes the lease, walks the compensations, settles
  the record ``cancelled``, releases the claims the record lists with their
  tokens, and gives the lease back. Claims found only through the store
  (``list_locks``: a client that rewrote the record without its ``locks``
  field) have no token here; they are named and left to lapse at their TTL.

Either way the gates still waiting are told (their trigger's ``on_cancel``:
``github_workflow`` cancels the run it dispatched) and then the compensations
(``on_cancel`` targets) run: the live owner does both itself once its bodies
stopped; a canceller that took the lease does them here
(:mod:`zuke.runs.compensate`) under the cancel lock. A ``suspended`` run it
takes is reported as such ("the run was suspended"), not as one whose owner
was gone. A canceller with no
build to run them with refuses a run that may owe some (a target succeeded),
unless told ``compensations="skip"``: owed compensations are never skipped
silently.

A ``suspended`` run whose lease is held is being moved by a resumer or a
sweep, not run: it is not marked (that would pull it out of ``suspended``
under its holder); the canceller waits for the holder to let go or to move
it to ``running``, and acts then.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._errors import ForeignRunError, RunError, RunNotFoundError, StateError, ZukeError
from zuke.runs.ownership import check_ownership, run_lease_ttl_ms, take_sync
from zuke.state._ids import check_id
from zuke.state._protocol import LockAcquired, StateStore, lease_key
from zuke.state.records import (
    TERMINAL_STATUSES,
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
)
from zuke.state.update import GaveUp, update_run

__all__ = ["CancelResult", "ForeignRunError", "cancel_run", "check_ownership"]

if TYPE_CHECKING:
    from zuke._build import Build

POLL_S = 0.2

Compensations = Literal["run", "skip"]


@dataclass(frozen=True)
class CancelResult:
    """What ``cancel_run`` did.

    ``status`` is the record's status afterwards: ``cancelled``, the terminal
    status it already had (``noop``), or ``cancelling`` when the live owner
    had not finished stopping within the wait.
    """

    run_id: str
    status: RunStatus
    noop: bool
    #: claims this call released (their holder was gone)
    released: list[str] = field(default_factory=list)
    #: claims of the run found in the store without a token here: left to lapse
    left: list[str] = field(default_factory=list)
    #: the actor of the live process that was asked to stop (None: nobody held the run)
    owner: str | None = None
    warnings: list[str] = field(default_factory=list)
    #: "deploy → rollback" per compensation this call ran (a dead owner's run)
    compensated: list[str] = field(default_factory=list)
    #: "deploy → rollback: error" per compensation that failed
    failures: list[str] = field(default_factory=list)
    #: what the walk said (a degraded record widened it, no build to compensate with)
    notes: list[str] = field(default_factory=list)
    #: "deploy → rollback" per compensation an earlier walk started and never finished
    interrupted: list[str] = field(default_factory=list)
    #: the run's status when this call took it in hand (``suspended``: parked at its gates,
    #: nobody running it; ``running``/``cancelling``: its owner was gone)
    was: RunStatus | None = None
    #: what each gate still waiting said when told of the cancel (its ``on_cancel``)
    gates: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One line for the console."""
        rid = self.run_id
        if self.noop:
            return f"Run {rid} is already {self.status}; nothing to cancel."
        if self.owner is not None:
            if self.status == "cancelling":
                return (
                    f"Run {rid} is marked cancelling; its owner ({self.owner}) is stopping it and "
                    "releases its own locks. Check with: zuke runs show " + rid
                )
            return f"Run {rid} cancelled by its owner ({self.owner}), who released its own locks."
        why = "it was suspended" if self.was == "suspended" else "its owner was gone"
        line = f"Run {rid} cancelled; {why}. Released {len(self.released)} claim(s)"
        line += f" ({', '.join(self.released)})." if self.released else "."
        if self.left:
            line += f" Left to lapse at their TTL: {', '.join(self.left)}."
        for said in self.gates:
            line += f" {said[:1].upper()}{said[1:]}."
        if self.compensated:
            line += f" Ran {len(self.compensated)} compensation(s)"
            line += f", {len(self.failures)} failed." if self.failures else "."
        if self.interrupted:
            line += (
                f" Not run again (an earlier walk was interrupted mid-way; they may be partly "
                f"done: check by hand): {', '.join(self.interrupted)}."
            )
        return line


def cancel_run(
    store: StateStore,
    run_id: str,
    *,
    actor: str,
    origin: str | None = None,
    build_name: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
    wait_ms: int = 0,
    sleep: Callable[[float], None] = time.sleep,
    build: type[Build] | None = None,
    env: Mapping[str, str] | None = None,
    compensations: Compensations = "run",
    no_build_reason: str | None = None,
) -> CancelResult:
    """Cancel ``run_id``; a run that already ended is a no-op.

    With a live owner, waits up to ``wait_ms`` for it to unwind itself (its
    compensations included). With the owner gone, this call walks the run's
    compensations itself — with ``build`` (loaded with the run's recorded
    parameters; ``env`` supplies secrets). Without a build, a run that may owe
    compensations is refused unless ``compensations="skip"`` (recorded on the
    run as the operator's choice); ``no_build_reason`` is the refusal's words
    when the build file exists but failed to load.
    """
    check_id(run_id)
    found = store.get_run(run_id)
    if found is None:
        raise RunNotFoundError(f'no run "{run_id}" in the store', run_id=run_id)
    check_ownership(found.record, origin=origin, build_name=build_name)
    if found.record.status in TERMINAL_STATUSES:
        return CancelResult(run_id=run_id, status=found.record.status, noop=True)
    environ = env or {}
    owner: str | None = None
    deadline = time.monotonic() + wait_ms / 1000
    # A resumer or sweep holding a suspended run lets go (or moves it) within its lease TTL.
    patience = time.monotonic() + max(wait_ms, run_lease_ttl_ms(environ, store)) / 1000
    while True:
        asked = SYSTEM_CLOCK.now_ms()  # the lease's expiry is at least this plus its TTL
        taken = take_sync(store, run_id, actor=actor, clock=clock, env=environ)
        if isinstance(taken, LockAcquired):  # nobody holds the run (or its owner just died)
            try:
                from zuke.runs.compensate import run_sync  # an engine: only with a walk

                settled = run_sync(_settle_held(store, run_id, taken, actor=actor, clock=clock,
                                                asked=owner, build=build, env=environ,
                                                compensations=compensations,
                                                since_ms=asked,
                                                no_build_reason=no_build_reason))  # fmt: skip
            finally:
                store.release_lock(lease_key(run_id), taken.token)
            if build is not None:  # the live owner reports its own cancel; this one, here
                settled.warnings.extend(_report(build, store, run_id, actor=actor, env=environ))
            return settled
        status = _mark_cancelling(store, run_id, owner=taken.holder.actor, actor=actor,
                                  clock=clock)  # fmt: skip
        if status == "cancelling" and owner is None:
            owner = taken.holder.actor
        if status in TERMINAL_STATUSES:
            return CancelResult(run_id=run_id, status=status, noop=False, owner=owner)
        waiting = status == "suspended" and time.monotonic() < patience
        if owner is not None and time.monotonic() >= deadline and not waiting:
            return CancelResult(run_id=run_id, status=status, noop=False, owner=owner)
        if owner is None and not waiting:
            raise RunError(
                f"run {run_id} stayed suspended under {taken.holder.actor}'s lease; try again",
                run_id=run_id,
            )
        sleep(POLL_S)


def _report(
    build: type[Build], store: StateStore, run_id: str, *, actor: str, env: Mapping[str, str]
) -> list[str]:
    """Tell the build's reporters the run was cancelled here (GitHub's deployments go
    ``inactive``); a reporter's failure is one of the cancel's warnings, never its error."""
    from zuke._engine.run import RunOptions
    from zuke.runs.compensate import run_sync
    from zuke.runs.reporting import report_run, reports

    said: list[str] = []
    if reports(build):
        options = RunOptions(env=dict(env), on_warning=said.append)
        run_sync(report_run(build, store, run_id, "cancelled", run=options, actor=actor))
    return said


def _status(store: StateStore, run_id: str) -> RunStatus:
    found = store.get_run(run_id)
    if found is None:
        raise RunNotFoundError(f'run "{run_id}" was deleted while cancelling', run_id=run_id)
    return found.record.status


def _mark_cancelling(
    store: StateStore, run_id: str, *, owner: str, actor: str, clock: Clock
) -> RunStatus:
    """Ask the live owner to stop: ``cancelling`` with an audit event. The status after.

    A ``suspended`` run is not marked: its lease holder is a resumer or a sweep about to
    move it, and a mark would pull the run out of ``suspended`` under them.
    """

    def mark(record: RunRecord) -> RunDelta | None:
        if record.status in (*TERMINAL_STATUSES, "cancelling", "suspended"):
            return None
        now = iso(clock.now_ms())
        event = RunEvent(
            at=now,
            tool="cancel",
            actor=actor,
            detail=f"cancel requested by {actor}; the owner ({owner}) stops the run",
        )
        return RunDelta(
            updated_at=now, status="cancelling", intended_terminal="cancelled", events=(event,)
        )

    outcome = update_run(store, run_id, mark)
    if isinstance(outcome, GaveUp):
        raise RunError(
            f"gave up cancelling {run_id} after repeated conflicting writes; try again",
            run_id=run_id,
        )
    return outcome.record.status


async def _settle_held(
    store: StateStore,
    run_id: str,
    taken: LockAcquired,
    *,
    actor: str,
    clock: Clock,
    asked: str | None,
    build: type[Build] | None,
    env: Mapping[str, str],
    compensations: Compensations,
    since_ms: int,
    no_build_reason: str | None = None,
) -> CancelResult:
    """Nobody holds the run and we hold its lease: walk its compensations, settle it,
    free its claims (:mod:`zuke.runs.compensate`).

    ``asked`` is the owner this call already asked to stop: finding the run
    ended then means that owner finished stopping it.
    """
    from zuke.runs.compensate import walk_taken
    from zuke.runs.lifecycle import hold_taken

    hold = await hold_taken(store, run_id, taken, ttl_ms=run_lease_ttl_ms(env, store),
                            clock=clock, since_ms=since_ms, actor=actor)  # fmt: skip
    try:
        record = hold.record
        if record.status in TERMINAL_STATUSES:
            return CancelResult(run_id=run_id, status=record.status, noop=asked is None,
                                owner=asked)  # fmt: skip
        owed = sorted(n for n, row in record.targets.items() if row.status == "succeeded")
        if build is not None and compensations == "run" and owed:
            no_build_reason = _unloadable(build, record, env, run_id)
            build = None if no_build_reason is not None else build
        if build is None and compensations == "run" and owed:
            if no_build_reason is not None:
                raise RunError(
                    f"{no_build_reason} (its targets {', '.join(owed)} succeeded); fix the "
                    f"build, or cancel without them: zuke cancel {run_id} --no-compensations",
                    run_id=run_id,
                )
            raise RunError(
                f"run {run_id} may owe compensations (its targets {', '.join(owed)} succeeded) "
                "and there is no build here to run them; cancel it where its build file is, "
                "or skip them deliberately (zuke cancel --no-compensations)",
                run_id=run_id,
            )
        now = iso(clock.now_ms())
        held = sorted(k for k in record.locks if k != lease_key(run_id))
        args = {"released": ",".join(held)}
        parked = record.status == "suspended"  # parked at its gates: nobody's, not "gone"
        detail = f"cancelled by {actor}; " + ("the run was suspended" if parked else
                                              "its owner was gone")  # fmt: skip
        if compensations == "skip" and owed:  # the operator's choice, on the audit trail
            args["compensations"] = "skipped"
            detail += f"; compensations skipped by {actor} (--no-compensations)"
        event = RunEvent(at=now, tool="cancel", actor=actor, detail=detail, args=args)
        result, released, warnings = await walk_taken(
            hold, build=build, env=env, actor=actor, intended="cancelled",
            reason=f"cancelled by {actor}", first=(event,), compensate=compensations == "run",
        )  # fmt: skip
    finally:
        await hold.release()
    if result.stopped is not None:
        raise RunError(f"cancelling {run_id} stopped: {result.stopped}; try again", run_id=run_id)
    live = sorted(set(result.claims) - set(released))  # left to lapse at their TTL
    left = live + _untracked_claims(store, run_id, known={*result.claims, *record.locks},
                                    warnings=warnings)  # fmt: skip
    return CancelResult(
        run_id=run_id,
        status=result.status,
        noop=False,
        released=released,
        left=left,
        warnings=warnings,
        compensated=result.compensated,
        failures=[f"{t} → {c}: {e}" for t, c, e in result.failures],
        notes=result.notes,
        interrupted=result.interrupted,
        was=record.status,
        gates=result.gates,
    )


def _unloadable(
    build: type[Build], record: RunRecord, env: Mapping[str, str], run_id: str
) -> str | None:
    """Why the build cannot be loaded for the run's compensations (a definition that
    raises), or ``None``: owed compensations are refused then, never skipped silently."""
    from zuke._engine.run import RunOptions
    from zuke.runs.lifecycle import load_for

    try:
        load_for(build, record, RunOptions(env=env))
    except ZukeError as exc:
        return f"{exc}; 'zuke cancel {run_id}' needs the build to run its compensations"
    return None


def _untracked_claims(
    store: StateStore, run_id: str, *, known: set[str], warnings: list[str]
) -> list[str]:
    """Claims the store says the run holds that its record did not list."""
    try:
        entries = store.list_locks(run_id=run_id)
    except (StateError, NotImplementedError, AttributeError) as exc:
        warnings.append(f"could not list the store's locks ({exc}); only the record's were freed")
        return []
    return sorted(e.key for e in entries if e.key not in known and e.key != lease_key(run_id))
