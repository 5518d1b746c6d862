"""Asking a suspended run's gates from the record alone: what a sweep does between runs.

A sweep may run in a process that never ran the build: each waiting gate's
trigger gets a :class:`~zuke._waits.WaitContext` built from the record (its
metadata as ``ctx.state``, the record's signals, the non-secret params), and
``persist()`` writes the gate's state into the record before the trigger's
external call. A trigger with an ``interval`` is asked no sooner than that
after the last time (``waitingFor.checkedAt``); a trigger that raises stays
waiting, with the error shown and counted. Whatever is recorded — state,
reasons, errors — is redacted first. Writes keep ``updatedAt``: a check moves
nothing.

A trigger that raises :class:`~zuke._errors.TriggerAccessError` (its service
refuses this process's credentials) is marked ``refused``: the sweep fails for
the run and leaves it as it was. (Before any check, a sweep offers the gates
to their triggers' batched ``prefetch``: :mod:`zuke.runs.sweep_prefetch`.)

Asking changes nothing, so checks run on a record read without the lease;
the run's lease is taken at the first change (:class:`~zuke.runs.lifecycle.
LazyHold`) — above all a trigger's ``persist()`` before its external call —
and is renewed while the trigger goes on. Taking it re-reads the record and
refuses unless the gate rows are as the check saw them, so two sweeps asking
one gate at once make its external call (a dispatch) once. Every write is a
compare-and-swap decided on the fresh record: only rows still ``waiting`` are
touched, with the fields the check owns (its state, ``checkedAt``, its
detail), never rows read before the check.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from zuke._clock import has_passed, iso, parse_iso
from zuke._engine import store_traits
from zuke._engine.plan import TargetSpec
from zuke._engine.run import LoadedBuild
from zuke._errors import AlreadyResumedError, RunError, TriggerAccessError, ZukeError
from zuke._waits import GateState, NotYet, WaitContext, WaitFailed, ask
from zuke.runs.lifecycle import Hold, LazyHold
from zuke.state.records import RunDelta, RunRecord, TargetRecord
from zuke.state.update import Unchanged

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass
class GateAnswer:
    """What one waiting gate's trigger answered in this sweep (and the state it kept)."""

    gate: str
    row: TargetRecord
    result: Any
    meta: dict[str, Any]
    due: bool = True
    errored: bool = False
    detail: str | None = None
    #: the trigger has an interval: every check is stamped, to measure the next from
    timed: bool = False
    #: past its deadline: this was its final check (``ctx.as_of_ms``), whatever its interval
    expired: bool = False
    #: the trigger's ``interval`` (0: none); with ``due`` false, why it was not asked now
    interval_ms: int = 0
    #: the trigger raised a :class:`~zuke._errors.TriggerAccessError`: the sweep fails
    refused: bool = False


class Basis(Protocol):
    """Where checks read the record and take the lease: a sweep's :class:`LazyHold`, or a
    :class:`Hold` already taken (:class:`Taken`)."""

    @property
    def basis(self) -> RunRecord: ...

    @property
    def actor(self) -> str: ...

    async def get(self) -> Hold: ...


class Taken:
    """A :class:`Hold` already taken, as the checks' :class:`Basis`."""

    def __init__(self, hold: Hold) -> None:
        self.hold = hold

    @property
    def basis(self) -> RunRecord:
        return self.hold.record

    @property
    def actor(self) -> str:
        return self.hold.actor

    async def get(self) -> Hold:
        return self.hold


def past_deadline(row: TargetRecord, now: int) -> bool:
    """Whether a waiting gate's deadline has passed (its next check is its final one)."""
    return has_passed(row.waiting_for.deadline if row.waiting_for else None, now)


async def check_gates(
    loaded: LoadedBuild,
    lazy: Basis,
    now: int,
    shared: dict[str, Any],
    *,
    expired: bool | None = None,
) -> list[GateAnswer]:
    """Ask every waiting gate's trigger (``expired``: only those past their deadline, or
    only those not), from the record ``lazy`` was built on; a ``persist()`` takes the
    run's lease first (a run held or moved: AlreadyResumedError). A gate past its deadline
    is asked as of it (``ctx.as_of_ms``), whatever its interval: its final check."""
    record = lazy.basis
    checks = []
    for name, row in record.targets.items():
        if row.status != "waiting":
            continue
        late = past_deadline(row, now)
        if expired is not None and late != expired:
            continue
        # A gate inside a fan-out's item is found by re-materialising the fan-out; a
        # fan-out that cannot be fails this check (raised: the sweep reports the run).
        spec = await loaded.index.get(name)
        if spec is None or spec.wait is None:
            continue
        trigger = spec.wait.trigger
        check = GateAnswer(name, row, NotYet(), dict(row.meta), timed=bool(trigger.interval_ms),
                           expired=late, interval_ms=trigger.interval_ms or 0)  # fmt: skip
        checks.append(check)
        if row.waiting_for is not None and row.waiting_for.failed is not None:
            check.result = WaitFailed(row.waiting_for.failed)  # decided: never asked again
            continue
        stamp = row.waiting_for.checked_at if row.waiting_for else None
        last = parse_iso(stamp) if stamp else None
        if (
            not late
            and trigger.interval_ms
            and last is not None
            and now - last < trigger.interval_ms
        ):
            check.due = False  # asked less than `interval` ago: not yet
            check.detail = row.waiting_for.detail if row.waiting_for else None
            continue

        def read(check: GateAnswer = check) -> dict[str, Any]:
            return dict(check.meta)

        def write(patch: Mapping[str, Any], check: GateAnswer = check) -> None:
            from zuke._engine.context import clean_patch, merge_patch

            check.meta = merge_patch(check.meta, clean_patch(patch, loaded.redactor))

        async def persist(check: GateAnswer = check) -> None:
            await _persist_meta(await lazy.get(), check)

        ctx = record_context(loaded, record, name, GateState(read, write), now, persist, shared,
                             resumed_by=lazy.actor)  # fmt: skip
        try:
            check.result = await ask(trigger, ctx)
        except AlreadyResumedError:
            raise  # its persist() found the run held or moved: this check is someone else's
        except Exception as exc:
            check.errored, check.refused = True, isinstance(exc, TriggerAccessError)
            said = str(exc) if check.refused else f"the trigger raised {type(exc).__name__}: {exc}"
            check.detail = loaded.redactor.text(said)
            continue
        # A trigger's reasons are recorded and printed: never with a secret in them.
        if isinstance(check.result, NotYet) and check.result.reason:
            check.detail = loaded.redactor.text(check.result.reason)
        elif isinstance(check.result, WaitFailed):
            check.result = WaitFailed(loaded.redactor.text(check.result.reason))
    return checks


#: how long a trigger's ``on_timeout`` hook may take before the disposition goes ahead
TIMEOUT_HOOK_S = 60.0


async def timeout_hook(
    loaded: LoadedBuild, record: RunRecord, gate: str, now: int, *, actor: str
) -> str | None:
    """Call the timed-out gate's ``trigger.on_timeout`` (from the record alone); a note
    saying why, if the hook raised or hung — never an exception: the disposition must run."""
    try:
        spec = await loaded.index.get(gate)
    except ZukeError as exc:  # a fan-out's items that cannot be re-read: say so, go on
        return loaded.redactor.text(f"gate {gate!r}: its trigger's on_timeout hook not run: {exc}")
    if spec is None or spec.wait is None:
        return None
    row = record.targets[gate]
    meta = dict(row.meta)

    async def keep() -> None:
        return None

    state = GateState(lambda: dict(meta), lambda patch: None)
    ctx = record_context(loaded, record, gate, state, now, keep, resumed_by=actor)
    try:
        await asyncio.wait_for(spec.wait.trigger.on_timeout(ctx), TIMEOUT_HOOK_S)
    except Exception as exc:
        what = "timed out" if isinstance(exc, TimeoutError) else f"raised {type(exc).__name__}"
        return loaded.redactor.text(
            f"gate {gate!r}: its trigger's on_timeout hook {what}: {exc}".rstrip(": ")
        )
    return None


def passed_rows(
    loaded: LoadedBuild, passed: list[GateAnswer], stamp: str
) -> dict[str, TargetRecord]:
    """The rows of gates that passed, succeeded with the state their checks kept (a gate
    with effects is left to the engine, which passes it and drives them)."""
    return {
        c.gate: replace(c.row, status="succeeded", ended_at=stamp, waiting_for=None, meta=c.meta)
        for c in passed
        if not _has_effects(loaded.index.known(c.gate))
    }


def _has_effects(spec: TargetSpec | None) -> bool:
    return spec is not None and bool(spec.effects)


def record_context(
    loaded: LoadedBuild,
    record: RunRecord,
    gate: str,
    state: GateState,
    now: int,
    persist: Callable[[], Awaitable[None]],
    shared: dict[str, Any] | None = None,
    *,
    resumed_by: str,
) -> WaitContext:
    """A trigger's context built from the record alone (a sweep, a timeout's hook): the
    run's starter as recorded, ``resumed_by`` this process's actor, and the loaded build's
    redactor (the secrets this process's environment gives it)."""
    row = record.targets[gate]
    deadline = row.waiting_for.deadline if row.waiting_for else None
    return WaitContext(
        run_id=record.id,
        target=gate,
        params=loaded.public_params,
        signals=record.signals,
        state=state,
        now_ms=now,
        deadline_ms=parse_iso(deadline) if deadline else None,
        persist=persist,
        shared=shared,
        actor=record.actor,
        actor_source=record.actor_source,
        resumed_by=resumed_by,
        redact=loaded.redactor.text,
    )


def _still_waiting(fresh: RunRecord, check: GateAnswer) -> TargetRecord:
    """The gate's row as stored now; a run or row that moved stops the check."""
    row = fresh.targets.get(check.gate)
    if fresh.status != "suspended" or row is None or row.status != "waiting":
        raise RunError(f"run {fresh.id} changed while its gate {check.gate} was checked")
    return row


async def _persist_meta(hold: Hold, check: GateAnswer) -> None:
    """``ctx.persist()``: the gate's state lands under the lease before the trigger goes on."""

    def change(fresh: RunRecord) -> RunDelta | None:
        row = _still_waiting(fresh, check)
        return RunDelta(
            updated_at=fresh.updated_at, targets={check.gate: replace(row, meta=check.meta)}
        )

    outcome = await hold.write(change)
    if isinstance(outcome, Unchanged) or outcome.record.targets[check.gate].meta != check.meta:
        raise RunError(f"run {hold.run_id}: gate {check.gate}'s state did not land; not going on")


async def record_checks(lazy: LazyHold, checks: list[GateAnswer], now: int) -> None:
    """Stamp what the checks said (when, and why not yet) — only where it matters:
    a trigger with an interval, a changed detail, or state the trigger kept.

    On a checkpointed store (each write a commit, three with the lease) a reason
    that changed alone — "queued", then "in progress" — is shown by the sweep but
    not written: only kept state, a new error and an interval's stamp are.
    """
    costly = store_traits.checkpointed(lazy.store)
    due = []
    for check in checks:
        waiting = check.row.waiting_for
        if not check.due or waiting is None:
            continue
        new_detail = check.detail != waiting.detail
        kept = check.meta != dict(check.row.meta)
        if costly:
            worth = check.timed or kept or (check.errored and new_detail)
        else:
            worth = check.timed or kept or new_detail or check.errored
        if worth:
            due.append(check)  # most sweeps of a signal gate write nothing
    if not due:
        return

    def change(fresh: RunRecord) -> RunDelta | None:
        if fresh.status != "suspended":
            return None
        rows = {}
        for check in due:
            row = fresh.targets.get(check.gate)
            if row is None or row.status != "waiting" or row.waiting_for is None:
                continue  # it moved: what this check read is stale
            stamped = replace(row.waiting_for, checked_at=iso(now), detail=check.detail)
            rows[check.gate] = replace(row, meta=check.meta, waiting_for=stamped)
        # updatedAt is kept: a check moves nothing (parked time runs from parkedAt)
        return RunDelta(updated_at=fresh.updated_at, targets=rows) if rows else None

    await (await lazy.get()).write(change)
