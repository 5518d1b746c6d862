"""``zuke resume --check``: reap abandoned runs, then re-check every suspended run.

One sweep, in this order:

1. **reap** this build's ``running`` and ``cancelling`` runs whose holder is
   gone (:mod:`zuke.runs.reap`); a reaped run is back to ``suspended``;
2. the waiting gates of every listed **suspended** run are offered to their
   triggers' ``prefetch`` together (one batched read for many gates:
   :mod:`zuke.runs.sweep_prefetch`), then
3. for each of this build's **suspended** runs (or just ``run_id``):
   a gate past its deadline is asked once more, as of its deadline
   (``ctx.as_of_ms``): an answer given in time passes it, a failure takes its
   ``on_failure`` disposition, anything else its timeout disposition; then
   each other waiting gate's trigger is asked — not sooner than its
   ``interval`` after the last check — and a run with a satisfied gate, or
   with no gate waiting at all (a reaped run), is resumed in this process. A
   gate whose trigger failed takes its ``on_failure`` disposition.

Running late, twice, or beside another sweep is safe: asking a gate changes
nothing, so it needs no lease; the run's lease is taken at the first change
(:class:`~zuke.runs.lifecycle.LazyHold`: a trigger's ``persist()`` before its
external call, a gate that passed, failed or timed out, a check worth
stamping), the record read again under it and the change refused if the run
moved meanwhile; every move is a compare-and-swap on its version. A run
someone else holds is skipped, with its real status. A sweep with nothing due
costs reads only. One bad run never stops the sweep; it is reported and
counted.

A store whose writes are rationed (``reserve_writes``: the GitHub branch
store) is asked before each change whether its budget affords it — a resume
by :func:`~zuke._engine.store_traits.resume_writes`' estimate — and a run it
does not afford is left ``suspended`` and reported ``deferred`` (not failed):
the next sweep takes it up. So no run is left half resumed for want of budget.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from zuke._build import Build
from zuke._clock import iso
from zuke._engine import store_traits as traits
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.resumed import plan_of
from zuke._engine.run import LoadedBuild, RunOptions, load
from zuke._errors import (
    AlreadyResumedError,
    ParameterError,
    RunNotFoundError,
    StoreUnavailableError,
    ZukeError,
)
from zuke._provenance import build_origin, resolve_actor
from zuke._waits import Satisfied, WaitFailed
from zuke.runs.continuation import ResumeOptions, check_resumable, continue_due, resume_now
from zuke.runs.gate_checks import GateAnswer, check_gates, passed_rows, record_checks
from zuke.runs.gate_failures import settle_failed_gate
from zuke.runs.lifecycle import LazyHold, check_settings, load_for, ownership_problem
from zuke.runs.reap import reap_run
from zuke.runs.reporting import report_run
from zuke.runs.sweep_prefetch import prefetch_runs
from zuke.runs.sweep_report import SweepEntry, SweepReport, check_detail, last_checked
from zuke.runs.timeouts import settle_timeout
from zuke.state._protocol import RunQuery, StateStore, StoredRun
from zuke.state.records import RunDelta, RunEvent, RunRecord, RunStatus

#: the audit trail's event of a gate a sweep passed (``detail``: what satisfied it)
PASSED_EVENT = "gate-passed"


async def resume_check_async(
    build_cls: type[Build],
    store: StateStore,
    *,
    run_id: str | None = None,
    resume: ResumeOptions | None = None,
    run: RunOptions,
    stop: Callable[[], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> SweepReport:
    """One sweep over this build's runs (or one run); ``stop`` (the watcher's SIGTERM) is
    asked between runs, never inside one: a run taken in hand is finished first.
    ``progress(done, total)`` is told before each run and at the end (a terminal's live line);
    the total grows when the suspended runs are listed, after reaping."""
    halt = stop or (lambda: False)
    tell = progress or (lambda done, total: None)
    resume = resume or ResumeOptions()
    check_settings(run.env, store)
    actor = resolve_actor(resume.actor, run.env)
    try:
        specs: Mapping[str, TargetSpec] | None = load(
            build_cls, dict(resume.params), run.env, lenient=True
        ).graph.specs
    except ParameterError:
        specs = None  # its definitions read a parameter only a run's record has
    name = build_cls.__name__
    if run_id is not None and store.get_run(run_id) is None:
        raise RunNotFoundError(f'resume --check: no run "{run_id}" in the store', run_id=run_id)
    entries: list[SweepEntry] = []
    unsettled: tuple[RunStatus, ...] = ("running", "cancelling")
    reaping = [(s, status) for status in unsettled for s in _runs(store, name, status, run_id)]
    done, total = 0, len(reaping)
    for summary, status in reaping:
        tell(done, total)
        done += 1
        if halt():
            return SweepReport(entries)
        entry = await _reap_one(build_cls, store, summary, status, run, actor, specs,
                                one=run_id is not None)  # fmt: skip
        if entry is not None:
            entries.append(entry)
    shared: dict[str, Any] = {}
    suspended = _runs(store, name, "suspended", run_id)

    def ours(record: RunRecord, graph: Mapping[str, object] | None) -> bool:
        return _ours(record, name, graph, run.env)

    loads = await prefetch_runs(build_cls, store, suspended, run, shared, actor=actor, ours=ours)
    total += len(suspended)
    for summary in suspended:
        tell(done, total)
        done += 1
        if halt():
            break
        prefetched = loads.pop(summary, None)
        entry = await _check_one(
            build_cls,
            store,
            summary,
            resume,
            run,
            actor,
            shared,
            specs_names=None if specs is None else set(specs),
            prefetched=prefetched,
        )
        entries.append(entry)
        if entry.action in _REPORTED:  # a reporter whose last write failed catches up here
            await report_run(build_cls, store, entry.run_id, "swept", run=run, actor=actor,
                             loaded=prefetched[0] if prefetched else None)  # fmt: skip
    tell(done, total)
    return SweepReport(entries)


async def _reap_one(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    status: RunStatus,
    run: RunOptions,
    actor: str,
    specs: Mapping[str, TargetSpec] | None,
    *,
    one: bool,
) -> SweepEntry | None:
    name = build_cls.__name__
    try:  # one unreadable record never stops the sweep: it is reported and counted
        found = store.get_run(run_id)
        if found is None or not _ours(found.record, name, None, run.env):
            return None
        graph = specs or load_for(build_cls, found.record, run).graph.specs
        if not _ours(found.record, name, graph, run.env):
            return None
        reaped = await reap_run(build_cls, store, run_id, run=run, actor=actor, status=status)
    except ZukeError as exc:
        return _failed(run_id, name, status, exc)
    if reaped.action in ("returned", "settled", "finished"):
        return SweepEntry(run_id, name, "reaped", reaped.status, detail=reaped.detail)
    if reaped.action in ("stopped", "claims"):  # another's walk, or a live lock: say which
        return SweepEntry(run_id, name, "left-alone", reaped.status, detail=reaped.detail)
    if reaped.action == "live" and one:
        return SweepEntry(run_id, name, "left-alone", status, detail=reaped.detail)
    return None


def _failed(run_id: str, name: str, status: str, exc: ZukeError) -> SweepEntry:
    """A run the sweep could not check or continue: reported, counted, the sweep goes on;
    a store that failed is said so (the run is left as it was, for the next sweep)."""
    unreachable = isinstance(exc, StoreUnavailableError)
    return SweepEntry(run_id, name, "failed", status, detail=str(exc), store_failed=unreachable)


#: a sweep's outcomes for a run of this build that its reporters are told of ("swept")
_REPORTED = frozenset(
    {"resumed", "still-waiting", "timed-out", "gate-failed", "deferred", "not-checked"}
)


def _runs(store: StateStore, build: str, status: str, run_id: str | None) -> list[str]:
    if run_id is not None:
        found = store.get_run(run_id)
        return [run_id] if found is not None and found.record.status == status else []
    query = RunQuery(status=status, build=build)  # type: ignore[arg-type]
    return [s.id for s in store.list_runs(query)]


def _ours(
    record: RunRecord, name: str, specs: Mapping[str, object] | None, env: Mapping[str, str]
) -> bool:
    """This build's run: same class name and root target, and origins do not disagree
    (``specs`` ``None``: the root target is not checked yet)."""
    if ownership_problem(record, origin=build_origin(env), build_name=name) is not None:
        return False
    return specs is None or record.root_target in specs


async def _check_one(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    resume: ResumeOptions,
    run: RunOptions,
    actor: str,
    shared: dict[str, Any],
    *,
    specs_names: set[str] | None,
    prefetched: tuple[LoadedBuild, StoredRun] | None = None,
) -> SweepEntry:
    name = build_cls.__name__
    loaded, found = prefetched if prefetched is not None else (None, None)
    try:
        found = found or store.get_run(run_id)
    except ZukeError as exc:  # a record that does not parse: reported, the sweep goes on
        return _failed(run_id, name, "suspended", exc)
    if found is None or found.record.status != "suspended":
        return SweepEntry(run_id, name, "skipped-held", found.record.status if found else "gone")
    record = found.record
    names = None if specs_names is None else dict.fromkeys(specs_names)
    if names is None and _ours(record, name, None, run.env):
        try:  # the build's definitions need the run's own parameters
            names = dict.fromkeys(load_for(build_cls, record, run).graph.specs)
        except ZukeError as exc:
            return _failed(run_id, name, record.status, exc)
    if not _ours(record, name, names, run.env):
        return SweepEntry(
            run_id,
            record.build,
            "skipped-foreign",
            record.status,
            detail=f"a run of {record.build} ({record.build_id or 'no origin'})",
        )
    try:
        return await _sweep_run(build_cls, store, found, resume, run, actor, shared, loaded)
    except AlreadyResumedError as exc:
        now = store.get_run(run_id)
        status = now.record.status if now is not None else "gone"
        return SweepEntry(run_id, name, "skipped-held", status, detail=str(exc))
    except ZukeError as exc:
        return _failed(run_id, name, record.status, exc)


async def _sweep_run(
    build_cls: type[Build],
    store: StateStore,
    found: StoredRun,
    resume: ResumeOptions,
    run: RunOptions,
    actor: str,
    shared: dict[str, Any],
    loaded: LoadedBuild | None = None,
) -> SweepEntry:
    record = found.record
    loaded = loaded or load_for(build_cls, record, run)
    plan = await plan_of(loaded, record)
    check_resumable(record, plan, resume)
    lazy = LazyHold(store, record, actor=actor, clock=run.clock, env=run.env,
                    warn=run.on_warning)  # fmt: skip
    try:
        entry = await _sweep_checked(loaded, plan, lazy, resume, run, actor, shared)
    finally:
        held = await lazy.release()  # a no-op once a resume took the lease over
    if entry.result != "suspended" or not held:
        return entry
    # Let go, then look again: a signal stored while this sweep held the run is due now,
    # and its deliverer, finding the run held, left it to the holder.
    again = await continue_due(build_cls, store, record.id, run, actor=actor)
    if again is None:
        return entry
    notes = "; ".join(n for n in (entry.detail, *again.notes) if n) or None
    return replace(entry, action="resumed", result=again.status, detail=notes)


async def _sweep_checked(
    loaded: LoadedBuild,
    plan: Plan,
    lazy: LazyHold,
    resume: ResumeOptions,
    run: RunOptions,
    actor: str,
    shared: dict[str, Any],
) -> SweepEntry:
    """Check one run's gates; every change is made under its lease, taken then."""
    record = lazy.basis
    name = type(loaded.build).__name__
    now = run.clock.now_ms()
    # Gates past their deadline first, each asked once more as of it: an answer given in
    # time passes it however late this sweep runs; none (or a trigger that cannot say) times
    # it out. Only then are the other gates asked.
    final = await check_gates(loaded, lazy, now, shared, expired=True)
    if (refused := _refused(record.id, name, final)) is not None:
        return refused
    for check in final:
        if isinstance(check.result, WaitFailed):
            return await _settle_failed(loaded, lazy, check, run, actor)
        if not isinstance(check.result, Satisfied):
            return await _settle_timeout(loaded, lazy, check, run, actor)
    checks = [*final, *await check_gates(loaded, lazy, now, shared, expired=False)]
    if (refused := _refused(record.id, name, checks)) is not None:
        return refused
    failed = next((c for c in checks if isinstance(c.result, WaitFailed)), None)
    if failed is not None:
        return await _settle_failed(loaded, lazy, failed, run, actor)
    passed = [c for c in checks if isinstance(c.result, Satisfied)]
    if passed or not checks:
        gates = ", ".join(c.gate for c in passed) or None
        writes = traits.resume_writes(loaded.graph.specs, record, {c.gate for c in passed})
        if not traits.reserve_writes(lazy.store, writes):  # decided before anything is written
            return _deferred(record.id, name, gates, writes)
        hold = await lazy.get()
        stamp = iso(now)
        rows = passed_rows(loaded, passed, stamp)
        outcome = await resume_now(
            loaded,
            plan,
            hold,
            resume,
            run,
            actor=actor,
            delta_extra=RunDelta(
                updated_at=stamp, targets=rows, events=_passed_events(loaded, passed, stamp, actor)
            ),
        )
        lost = outcome.result.record_error if outcome.result is not None else None
        return SweepEntry(
            record.id,
            name,
            "failed" if lost else "resumed",  # a run whose end is not recorded is no success
            outcome.status,
            gate=gates,
            detail=lost or "; ".join(outcome.notes) or None,
        )
    stamping = traits.SETTLE_WRITES + traits.STAMP_HEADROOM  # unaffordable: the next sweep asks
    if traits.reserve_writes(lazy.store, stamping):
        await record_checks(lazy, checks, now)
    first = checks[0]
    # A gate inside its interval was not asked: its last answer is not passed off as current.
    detail = "; ".join(d for c in checks if (d := check_detail(c))) or None
    idle = all(not c.due for c in checks)
    return SweepEntry(
        record.id,
        name,
        "still-waiting",
        "suspended",
        gate=first.gate,
        detail=detail,
        errored=any(c.errored for c in checks),
        rechecked=not idle,
        last_checked=last_checked(first) if idle else None,
    )


def _refused(run_id: str, build: str, checks: list[GateAnswer]) -> SweepEntry | None:
    """A gate whose trigger's service refused this process's credentials: the sweep fails for
    the run, left waiting as it was (nothing is settled or written on a check it could not
    make); the entry says which credential to check."""
    check = next((c for c in checks if c.refused), None)
    if check is None:
        return None
    return SweepEntry(run_id, build, "failed", "suspended", gate=check.gate, detail=check.detail,
                      errored=True, access_failed=True)  # fmt: skip


def _passed_events(
    loaded: LoadedBuild, passed: list[GateAnswer], stamp: str, actor: str
) -> tuple[RunEvent, ...]:
    """The audit trail's line for each gate this sweep passed, with what its trigger said of
    who or what satisfied it (an approval's approvers), redacted."""
    return tuple(
        RunEvent(
            at=stamp,
            tool=PASSED_EVENT,
            actor=actor,
            args={"gate": c.gate},
            detail=loaded.redactor.text(c.result.audit)
            if isinstance(c.result, Satisfied) and c.result.audit
            else None,
        )
        for c in passed
    )


async def _settle_failed(
    loaded: LoadedBuild, lazy: LazyHold, check: GateAnswer, run: RunOptions, actor: str
) -> SweepEntry:
    """A gate whose trigger failed: its ``on_failure`` disposition, under the lease."""
    record, name = lazy.basis, type(loaded.build).__name__
    assert isinstance(check.result, WaitFailed)
    reason = check.result.reason
    if not traits.reserve_writes(lazy.store, traits.SETTLE_WRITES):
        return _deferred(record.id, name, check.gate, traits.SETTLE_WRITES)
    hold = await lazy.get()
    settled = await settle_failed_gate(loaded, hold, check.gate, reason, run, actor=actor)
    plain = settled.status == "failed" and settled.result is None  # "fail": the reason says it
    detail = reason if plain or not settled.notes else "; ".join(settled.notes)
    return SweepEntry(record.id, name, "gate-failed", settled.status, gate=check.gate,
                      detail=detail, handled=settled.ok)  # fmt: skip


async def _settle_timeout(
    loaded: LoadedBuild, lazy: LazyHold, check: GateAnswer, run: RunOptions, actor: str
) -> SweepEntry:
    """A gate past its deadline whose final check did not pass it: its timeout disposition."""
    record, name = lazy.basis, type(loaded.build).__name__
    if not traits.reserve_writes(lazy.store, traits.SETTLE_WRITES):
        return _deferred(record.id, name, check.gate, traits.SETTLE_WRITES)
    hold = await lazy.get()
    notes = [f"gate {check.gate!r}: its final check: {check.detail}"] if check.errored else []
    outcome = await settle_timeout(loaded, hold, check.gate, run, actor=actor, notes=notes)
    return SweepEntry(record.id, name, "timed-out", outcome.status, gate=check.gate,
                      detail="; ".join(outcome.notes), handled=outcome.ok)  # fmt: skip


def _deferred(run_id: str, build: str, gate: str | None, writes: int) -> SweepEntry:
    detail = (f"the store's write budget does not afford it now (about {writes} writes): "
              "left suspended for the next sweep")  # fmt: skip
    return SweepEntry(run_id, build, "deferred", "suspended", gate=gate, detail=detail)


def resume_check(
    build_cls: type[Build],
    run_id: str | None = None,
    *,
    force_graph: bool = False,
    resume_degraded: bool = False,
    actor: str | None = None,
    env: Mapping[str, str] | None = None,
    store: StateStore | None = None,
) -> SweepReport:
    """One sweep in this process (what ``zuke resume --check [RUN_ID]`` calls)."""
    import asyncio
    import os

    from zuke.runs.store import open_store

    environ = dict(os.environ) if env is None else env
    options = ResumeOptions(force_graph=force_graph, resume_degraded=resume_degraded, actor=actor)
    chosen = store or open_store(environ, build=build_cls)
    return asyncio.run(
        resume_check_async(
            build_cls, chosen, run_id=run_id, resume=options, run=RunOptions(env=environ)
        )
    )


__all__ = ["resume_check", "resume_check_async"]
