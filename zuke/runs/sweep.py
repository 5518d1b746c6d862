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

A sweep of some runs (``runs``: the runs a watcher's wakes named) reads each
named run once instead of listing every run: a named run that is this build's
and ``running`` or ``cancelling`` is reaped as in step 1, one ``suspended`` is
checked as in steps 2 and 3; any other is not reported.

Running late, twice, or beside another sweep is safe: asking a gate changes
nothing, so it needs no lease; the run's lease is taken at the first change
(:class:`~zuke.runs.lifecycle.LazyHold`: a trigger's ``persist()`` before its
external call, a gate that passed, failed or timed out, a check worth
stamping), the record read again under it and the change refused if the run
moved meanwhile; every move is a compare-and-swap on its version. A run
someone else holds is skipped, with its real status. A sweep with nothing due
costs reads only. One bad run never stops the sweep; it is reported and
counted.

What happens to one suspended run (steps 3's checks, and the resume, settlement, stamp
or deferral that follows) is :mod:`zuke.runs.sweep_run`'s; this module picks the runs.

A store whose writes are rationed (``reserve_writes``: the GitHub branch
store) is asked before each change whether its budget affords it — a resume
by :func:`~zuke._engine.store_traits.resume_writes`' estimate — and a run it
does not afford is left ``suspended`` and reported ``deferred`` (not failed):
the next sweep takes it up. So no run is left half resumed for want of budget.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from zuke._build import Build
from zuke._engine.plan import TargetSpec
from zuke._engine.run import LoadedBuild, RunOptions, load
from zuke._errors import (
    AlreadyResumedError,
    ParameterError,
    RunNotFoundError,
    StoreUnavailableError,
    ZukeError,
)
from zuke._provenance import build_origin, resolve_actor
from zuke.runs.continuation import ResumeOptions
from zuke.runs.lifecycle import check_settings, load_for, ownership_problem
from zuke.runs.reap import reap_run
from zuke.runs.sweep_prefetch import prefetch_runs
from zuke.runs.sweep_report import SweepEntry, SweepReport
from zuke.runs.sweep_run import sweep_run
from zuke.state._protocol import RunQuery, StateStore, StoredRun
from zuke.state.records import RunRecord, RunStatus


async def resume_check_async(
    build_cls: type[Build],
    store: StateStore,
    *,
    run_id: str | None = None,
    resume: ResumeOptions | None = None,
    run: RunOptions,
    stop: Callable[[], bool] | None = None,
    progress: Callable[[int, int], None] | None = None,
    runs: Collection[str] | None = None,
) -> SweepReport:
    """One sweep over this build's runs (or one run, or the named ``runs``); ``stop`` (the
    watcher's SIGTERM) is asked between runs, never inside one: a run taken in hand is
    finished first.
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
    named = None if runs is None else _named(store, name, runs)
    if named is not None:
        reaping = [(r, f.record.status) for r, f in named.items() if f.record.status in unsettled]
    else:
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
    if named is not None:
        suspended = [r for r, f in named.items() if f.record.status == "suspended"]
    else:
        suspended = _runs(store, name, "suspended", run_id)

    def ours(record: RunRecord, graph: Mapping[str, object] | None) -> bool:
        return _ours(record, name, graph, run.env)

    loads = await prefetch_runs(build_cls, store, suspended, run, shared, actor=actor, ours=ours,
                                read=named)  # fmt: skip
    total += len(suspended)
    for summary in suspended:
        tell(done, total)
        done += 1
        if halt():
            break
        entries.append(
            await _check_one(
                build_cls,
                store,
                summary,
                resume,
                run,
                actor,
                shared,
                specs_names=None if specs is None else set(specs),
                prefetched=loads.pop(summary, None),
            )
        )
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


def _named(store: StateStore, build: str, runs: Collection[str]) -> dict[str, StoredRun]:
    """The named runs of this build (as a listing's ``build`` filter keeps them), one read
    each, in a stable order; a run gone, or whose record does not parse, is left out: a wake
    for it is no reason to fail the sweep."""
    found: dict[str, StoredRun] = {}
    for run_id in sorted(runs):
        try:
            stored = store.get_run(run_id)
        except StoreUnavailableError:
            raise  # the store, not the run: the watcher retries the sweep
        except ZukeError:
            continue  # an unreadable record: the interval's full sweep reports it
        if stored is not None and stored.record.build == build:
            found[run_id] = stored
    return found


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
        return await sweep_run(build_cls, store, found, resume, run, actor, shared, loaded)
    except AlreadyResumedError as exc:
        now = store.get_run(run_id)
        status = now.record.status if now is not None else "gone"
        return SweepEntry(run_id, name, "skipped-held", status, detail=str(exc))
    except ZukeError as exc:
        return _failed(run_id, name, record.status, exc)


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
