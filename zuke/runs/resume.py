"""``zuke resume RUN_ID``: continue a suspended run exactly once, from any process.

The order of checks is the contract:

1. the run exists and belongs to this build (name and origin);
2. a repeated delivery of the same signal (same ``--signal-id``) is a no-op;
3. the run is ``suspended`` — anything else is refused, naming its status
   (a run already taken by another resumer: :class:`AlreadyResumedError`);
4. the build still has the run's graph (``--force-graph`` overrides) and the
   record lost no writes (``--resume-degraded`` overrides);
5. a gate past its deadline is settled by its timeout disposition instead —
   unless a signal it waits for arrived *before* the deadline, which wins
   however late the resume that sees it comes;
6. the run's **lease is taken before the record leaves** ``suspended``, so a
   record that says ``running`` always has a live holder; a held lease means
   somebody else is resuming it;
7. a compare-and-swap ``suspended → running`` delivers the signal, names the
   resumer and pushes ``deadlineAt`` forward by the time the run was parked.
   Exactly one resumer wins it; every other gets :class:`AlreadyResumedError`.

Then the engine drives what has not succeeded (:mod:`zuke._engine.resumed`),
and the lease is released on every way out.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from zuke._build import Build
from zuke._clock import iso, parse_iso
from zuke._engine.claims import lease_key
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.result import RunResult
from zuke._engine.resumed import Adoption, execute_resumed, graph_drift, plan_of
from zuke._engine.run import LoadedBuild, RunOptions, load
from zuke._errors import (
    AlreadyResumedError,
    DegradedRecordError,
    GraphChangedError,
    RunNotFoundError,
    RunNotSuspendedError,
    SignalRefusedError,
    ZukeError,
)
from zuke._provenance import build_origin, resolve_actor
from zuke.runs.cancel import check_ownership
from zuke.runs.timeouts import (
    expired_gate,
    settle_timeout,
    take_run_lease,
    timeout_refusal,
    unfinished_rollback,
)
from zuke.state._ids import check_id
from zuke.state._protocol import StateStore, StoredRun
from zuke.state.records import RunDelta, RunEvent, RunRecord, Signal
from zuke.state.update import GaveUp, Unchanged, update_run

#: The largest signal payload, as JSON text (UTF-8 bytes).
MAX_SIGNAL_BYTES = 64 * 1024

ResumeAction = Literal["resumed", "timed-out", "already-delivered"]


@dataclass(frozen=True)
class SignalDelivery:
    """A signal to deliver with a resume."""

    name: str
    data: Any = None
    #: the idempotency key; by default a hash of the name and the data
    id: str | None = None

    def key(self) -> str:
        if self.id:
            return self.id
        text = json.dumps([self.name, self.data], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_signal(delivery: SignalDelivery) -> None:
    """A signal's name and payload must be something the record can hold."""
    if not delivery.name.strip():
        raise SignalRefusedError("resume: --signal needs a name")
    try:
        text = json.dumps(delivery.data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SignalRefusedError(f"resume: the signal's data is not JSON ({exc})") from None
    if len(text.encode()) > MAX_SIGNAL_BYTES:
        raise SignalRefusedError(
            f"resume: the signal's data is {len(text.encode())} bytes; the limit is "
            f"{MAX_SIGNAL_BYTES} (64 KiB). Send a reference (a URL, an id) instead"
        )


@dataclass(frozen=True)
class ResumeOutcome:
    """What a resume did. ``result`` is the continued run's, when it ran."""

    run_id: str
    action: ResumeAction
    status: str
    result: RunResult | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        if self.action == "already-delivered":
            return True
        return self.result is not None and self.result.ok


@dataclass(frozen=True)
class ResumeOptions:
    """How to resume (what the command line sets)."""

    signal: SignalDelivery | None = None
    force_graph: bool = False
    resume_degraded: bool = False
    actor: str | None = None
    #: parameter overrides (non-secret values may change; secrets come from the environment)
    params: Mapping[str, Sequence[str]] = field(default_factory=dict)


def load_for(build_cls: type[Build], record: RunRecord, run: RunOptions) -> LoadedBuild:
    """The build with the run's recorded parameters, overlaid with the resumer's."""
    params: dict[str, Sequence[str]] = {k: [v] for k, v in record.params.items()}
    params.update(run.params)
    return load(build_cls, params, run.env)


async def resume_run_async(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    resume: ResumeOptions,
    run: RunOptions,
) -> ResumeOutcome:
    """Resume ``run_id`` (see the module docstring for the order of checks)."""
    check_id(run_id)
    if resume.signal is not None:
        check_signal(resume.signal)
    found = store.get_run(run_id)
    if found is None:
        raise RunNotFoundError(f'resume: no run "{run_id}" in the store', run_id=run_id)
    record = found.record
    check_ownership(record, origin=build_origin(run.env), build_name=build_cls.__name__)
    signal = resume.signal
    if signal is not None:
        delivered = record.signals.get(signal.name)
        if delivered is not None and delivered.id == signal.key():
            return ResumeOutcome(
                run_id,
                "already-delivered",
                record.status,
                notes=[
                    f"signal {signal.name!r} (id {signal.key()}) was already delivered to run "
                    f"{run_id} at {delivered.received_at}; nothing to do"
                ],
            )
    await _check_suspended(store, record, signal)
    loaded = load_for(build_cls, record, run)
    plan = await plan_of(loaded, record)
    check_resumable(record, plan, resume)
    actor = resolve_actor(resume.actor, run.env)
    expired = expired_gate(record, run.clock.now_ms())
    if expired is not None:
        refusal = None if signal is None else timeout_refusal(record, expired, signal.name)
        notes = [refusal] if refusal else []
        try:
            return await settle_timeout(
                loaded, record, expired, run, actor=actor, store=store, notes=notes
            )
        except AlreadyResumedError:
            if refusal is None:
                raise  # another process settles the timeout; a late signal still hears why
            raise SignalRefusedError(f"resume: run {run_id}: {refusal}", run_id=run_id) from None
    return await resume_now(loaded, plan, store, found, resume, run, actor=actor)


def check_resumable(record: RunRecord, plan: Plan, resume: ResumeOptions) -> None:
    """The graph still matches and the record is whole, or the resumer said otherwise."""
    drift = graph_drift(record, plan)
    if drift and not resume.force_graph:
        raise GraphChangedError(
            f"resume: the build's graph no longer matches run {record.id}: {'; '.join(drift)}. "
            "Resume with --force-graph to continue with the build as it is now",
            run_id=record.id,
        )
    if record.degraded and not resume.resume_degraded:
        raise DegradedRecordError(
            f"resume: run {record.id}'s record is degraded (some writes were lost), so resuming "
            f"could run work twice. Check it with: zuke runs show {record.id}; then resume with "
            "--resume-degraded to go on anyway",
            run_id=record.id,
        )


async def _check_suspended(
    store: StateStore, record: RunRecord, signal: SignalDelivery | None
) -> None:
    if record.status == "suspended":
        return
    if signal is not None:
        refusal = timeout_refusal(record, None, signal.name)
        if refusal:
            raise SignalRefusedError(refusal, run_id=record.id)
    if record.status == "running":
        raise AlreadyResumedError(
            f"resume: run {record.id} is running (resumed or started by {record.actor} at "
            f"{record.updated_at}); nothing to do",
            run_id=record.id,
            by=record.actor,
        )
    raise RunNotSuspendedError(
        f'resume: run {record.id} is "{record.status}", not suspended',
        run_id=record.id,
        status=record.status,
    )


async def resume_now(
    loaded: LoadedBuild,
    plan: Plan,
    store: StateStore,
    found: StoredRun,
    resume: ResumeOptions,
    run: RunOptions,
    *,
    actor: str,
    delta_extra: RunDelta | None = None,
) -> ResumeOutcome:
    """Take the lease, CAS the record to ``running``, and drive the rest of the run."""
    record = found.record
    rollback = await unfinished_rollback(loaded, record)  # then the rest is the rollback
    now = run.clock.now_ms()
    held = (
        f"resume: run {record.id} is being resumed by {{actor}} (it holds the run's lease); "
        "nothing to do"
    )
    taken = await take_run_lease(store, record, run, actor=actor, held=held)
    try:
        change = _to_running(
            resume,
            actor,
            now,
            delta_extra,
            lease_token=taken.token,
            overrides=_recorded_overrides(loaded, resume),
        )
        updated = update_run(store, record.id, change)
        if isinstance(updated, (Unchanged, GaveUp)):
            raise AlreadyResumedError(
                f"resume: run {record.id} was resumed by {updated.record.actor} at "
                f"{updated.record.updated_at}; nothing to do",
                run_id=record.id,
                by=updated.record.actor,
            )
        adoption = Adoption(store, StoredRun(updated.record, updated.version), taken)
        notes = await _signal_notes(loaded, record, resume.signal)
        result = await execute_resumed(loaded, rollback or plan, adoption, run, actor=actor,
                                       settle_as="cancelled" if rollback else None)  # fmt: skip
    except BaseException:
        # Nobody drives the run: give the lease back (a no-op if the engine already did).
        await _release_quietly(store, record.id, taken.token)
        raise
    return ResumeOutcome(record.id, "resumed", result.status, result=result, notes=notes)


def _to_running(
    resume: ResumeOptions,
    actor: str,
    now_ms: int,
    extra: RunDelta | None,
    *,
    lease_token: str,
    overrides: Mapping[str, str],
) -> Callable[[RunRecord], RunDelta | None]:
    def change(fresh: RunRecord) -> RunDelta | None:
        if fresh.status != "suspended":
            return None  # another resumer won
        stamp = iso(now_ms)
        signals = {}
        args = {}
        if resume.signal is not None:
            signals[resume.signal.name] = Signal(
                data=resume.signal.data, received_at=stamp, id=resume.signal.key()
            )
            args = {"signal": resume.signal.name, "signalId": resume.signal.key()}
        event = RunEvent(at=stamp, tool="resume", actor=actor, args=args)
        delta = RunDelta(
            updated_at=stamp,
            status="running",
            actor=actor,
            signals=signals,
            events=(event,),
            deadline_at=_pushed_deadline(fresh, now_ms),
            # The record names its holder's lease: a paused former owner that wakes up
            # sees it is no longer theirs and writes nothing.
            locks={lease_key(fresh.id): lease_token},
            params=overrides,  # what this resume changed is what the run goes on with
        )
        if extra is not None:
            delta = replace(delta, targets=extra.targets, events=(*extra.events, event))
        return delta

    return change


def _recorded_overrides(loaded: LoadedBuild, resume: ResumeOptions) -> dict[str, str]:
    """The resumer's non-secret parameter overrides, as text to record on the run."""
    from zuke._build import parameters

    secret = {p.name for p in parameters(type(loaded.build)) if p.is_secret}
    raw = loaded.resolution.raw
    return {
        name: loaded.redactor.text(raw[name])
        for name in resume.params
        if name in raw and name not in secret
    }


def _pushed_deadline(record: RunRecord, now_ms: int) -> str | None:
    """``deadlineAt`` moved forward by the time the run was parked (since its last write)."""
    deadline = parse_iso(record.deadline_at) if record.deadline_at else None
    parked_since = parse_iso(record.updated_at)
    if deadline is None or parked_since is None or now_ms <= parked_since:
        return None  # unchanged
    return iso(deadline + (now_ms - parked_since))


async def _signal_notes(
    loaded: LoadedBuild, record: RunRecord, signal: SignalDelivery | None
) -> list[str]:
    if signal is None:
        return []
    waited = []
    for name, row in record.targets.items():
        spec = await _gate_spec(loaded, name) if row.status == "waiting" else None
        if row.status == "waiting" and spec is not None and spec.wait is not None:
            wanted = spec.wait.trigger.signal_name()
            if wanted == signal.name or wanted is None:
                return []  # a gate waits for it (or may read any signal)
            waited.append(f"{name} (signal {wanted!r})")
    listed = ", ".join(waited) or "no gate"
    return [
        f"run {record.id} is not waiting for the signal {signal.name!r}; it was delivered and "
        f"stored, and the run checks its gates again (waiting: {listed})"
    ]


async def _gate_spec(loaded: LoadedBuild, name: str) -> TargetSpec | None:
    """A waiting row's spec (a gate inside a fan-out's item included), if the build has it."""
    try:
        return await loaded.index.get(name)
    except ZukeError:
        return None  # the fan-out cannot be materialised now: say nothing about its gates


async def _release_quietly(store: StateStore, run_id: str, token: str) -> None:
    with contextlib.suppress(Exception):
        await asyncio.to_thread(store.release_lock, lease_key(run_id), token)


def resume_run(
    build_cls: type[Build],
    run_id: str,
    *,
    signal: str | None = None,
    data: Any = None,
    signal_id: str | None = None,
    force_graph: bool = False,
    resume_degraded: bool = False,
    actor: str | None = None,
    params: Mapping[str, str | Sequence[str]] | None = None,
    env: Mapping[str, str] | None = None,
    store: StateStore | None = None,
) -> ResumeOutcome:
    """Resume a suspended run in this process (what ``zuke resume RUN_ID`` calls)."""
    import os

    from zuke.runs.store import open_store

    environ = dict(os.environ) if env is None else env
    supplied = {k: [v] if isinstance(v, str) else list(v) for k, v in (params or {}).items()}
    options = ResumeOptions(
        signal=None if signal is None else SignalDelivery(signal, data, signal_id),
        force_graph=force_graph,
        resume_degraded=resume_degraded,
        actor=actor,
        params=supplied,
    )
    chosen = store or open_store(environ, build=build_cls)
    return asyncio.run(
        resume_run_async(
            build_cls, chosen, run_id, options, RunOptions(env=environ, params=supplied)
        )
    )
