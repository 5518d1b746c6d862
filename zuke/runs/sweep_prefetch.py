"""A sweep's batched read: every listed run's waiting gates offered to their triggers'
``prefetch`` together, once, before any gate is checked.

A trigger that reads a remote service can answer a hundred gates with one
request (``zuke_gh``'s approval gates: one GraphQL query for 100 issue
threads) if it is asked for all of them at once. So before checking any run,
the sweep reads each listed suspended run's record, loads the build for it,
builds a :class:`~zuke._waits.WaitContext` for each waiting gate — from the
record alone, without the run's lease, as any check is built — and hands the
contexts to ``trigger.prefetch``, grouped by ``trigger.batch_key()``. The
prefetch memoises what it read in ``ctx.shared``, which the sweep's checks
share.

* **Reads only**: ``ctx.persist()`` and ``ctx.state.set()`` refuse there.
* **Never a reason to skip a check**: a prefetch that raises is reported (one
  ``zuke:`` warning, redacted) and changes nothing — each gate is then checked
  on its own, as usual. A :class:`~zuke._errors.TriggerAccessError` is not
  warned about: each gate's check meets it again and the sweep reports it once.
* **Not a second read**: the records and builds read here are what each run's
  check starts from; a record that moved meanwhile is caught where the check
  takes the run's lease, as for any check made without it.
* A gate already decided (``waitingFor.failed``), or inside its trigger's
  ``interval`` and not past its deadline, is not offered: its check asks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from zuke._build import Build
from zuke._clock import parse_iso
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._errors import RunError, TriggerAccessError, ZukeError
from zuke._waits import GateState, WaitContext, WaitTrigger
from zuke.runs.gate_checks import past_deadline, record_context
from zuke.runs.lifecycle import load_for
from zuke.state._protocol import StateStore, StoredRun
from zuke.state.records import RunRecord

#: whether a record is this build's run (its graph's targets, when known)
Ours = Callable[[RunRecord, Mapping[str, object] | None], bool]


async def prefetch_runs(
    build_cls: type[Build],
    store: StateStore,
    run_ids: Sequence[str],
    run: RunOptions,
    shared: dict[str, Any],
    *,
    actor: str,
    ours: Ours,
    read: Mapping[str, StoredRun] | None = None,
) -> dict[str, tuple[LoadedBuild, StoredRun]]:
    """Offer the listed runs' waiting gates to their triggers' batched reads, once; the record
    read and the build loaded for it, by run, for each run's check to start from. A run that
    cannot be read or loaded, or is not ``ours``, is left to its check, which reports it.
    ``read``: records the sweep has just read (a sweep of named runs), not read again."""
    loads: dict[str, tuple[LoadedBuild, StoredRun]] = {}
    for run_id in run_ids:
        try:
            found = read[run_id] if read is not None and run_id in read else store.get_run(run_id)
            if found is None or found.record.status != "suspended" or not ours(found.record, None):
                continue
            loaded = load_for(build_cls, found.record, run)
        except ZukeError:
            continue
        if ours(found.record, loaded.graph.specs):
            loads[run_id] = (loaded, found)
    if loads:
        runs = [(loaded, found.record) for loaded, found in loads.values()]
        for note in await prefetch_gates(runs, run.clock.now_ms(), shared, actor=actor):
            run.on_warning(f"zuke: {note}")
    return loads


async def prefetch_gates(
    runs: Sequence[tuple[LoadedBuild, RunRecord]], now: int, shared: dict[str, Any], *, actor: str
) -> list[str]:
    """Offer every waiting gate of ``runs`` (not decided, due by its interval) to its
    trigger's ``prefetch``, once per ``batch_key()``; the notes (redacted) of prefetches that
    raised — but for a :class:`~zuke._errors.TriggerAccessError`, which each gate's check
    meets again and the sweep reports."""
    groups: dict[Hashable, tuple[WaitTrigger, list[WaitContext], list[LoadedBuild]]] = {}
    for loaded, record in runs:
        for name, row in record.targets.items():
            waiting = row.waiting_for
            if row.status != "waiting" or waiting is None or waiting.failed is not None:
                continue
            try:
                spec = await loaded.index.get(name)
            except ZukeError:
                continue  # a fan-out that cannot be re-read: its check says so
            if spec is None or spec.wait is None or (key := spec.wait.trigger.batch_key()) is None:
                continue
            last = parse_iso(waiting.checked_at) if waiting.checked_at else None
            interval = spec.wait.trigger.interval_ms
            if interval and last is not None and now - last < interval and not past_deadline(
                row, now
            ):  # fmt: skip
                continue  # not due: its check will not ask either
            state = GateState(_copies(dict(row.meta)), _reads_only)
            ctx = record_context(loaded, record, name, state, now, _refuse_persist, shared,
                                 resumed_by=actor)  # fmt: skip
            group = groups.setdefault(key, (spec.wait.trigger, [], []))
            group[1].append(ctx)
            group[2].append(loaded)
    notes = []
    for trigger, contexts, loads in groups.values():
        try:
            await trigger.prefetch(contexts)
        except TriggerAccessError:
            continue
        except Exception as exc:
            said = (f"gate checks: {trigger.descriptor}'s batched read of {len(contexts)} gate(s) "
                    f"raised {type(exc).__name__}: {exc}; each is checked on its own")  # fmt: skip
            for loaded in loads:
                said = loaded.redactor.text(said)
            notes.append(said)
    return notes


def _copies(meta: dict[str, Any]) -> Callable[[], dict[str, Any]]:
    return lambda: dict(meta)


def _reads_only(patch: Mapping[str, Any]) -> None:
    raise RunError("a trigger's prefetch reads only: it cannot set a gate's state")


async def _refuse_persist() -> None:
    raise RunError("a trigger's prefetch reads only: it cannot persist a gate's state")
