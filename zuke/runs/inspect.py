"""Listing, showing and pruning recorded runs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from zuke._clock import parse_iso
from zuke._errors import RunNotFoundError, UsageError
from zuke.state._ids import check_id
from zuke.state._protocol import RunQuery, StateStore
from zuke.state.records import RUN_STATUSES, TERMINAL_STATUSES, RunRecord, RunSummary

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import
    from zuke.state._frozen import dataclass

_EVERY_RUN = RunQuery()


def parse_query(
    *,
    status: str | None,
    target: str | None,
    since: str | None,
    limit: int | None,
    build: str | None = None,
) -> RunQuery:
    """Validate the filters of ``zuke runs list``.

    ``since`` is compared as a time (fractions and offsets work); ``build`` is
    the build class name a run was recorded under (the record's ``build``).
    """
    if status is not None and status not in RUN_STATUSES:
        raise UsageError(f"--status {status}: expected one of {', '.join(RUN_STATUSES)}")
    if since is not None and parse_iso(since) is None:
        raise UsageError(f"--since {since}: expected an ISO-8601 time such as 2026-01-31T12:00:00Z")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit {limit}: expected a positive whole number")
    if build is not None and not build:
        raise UsageError("--build: expected the name of a build class")
    return RunQuery(status=status, target=target, since=since, limit=limit, build=build)


def list_runs(store: StateStore, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
    return store.list_runs(query)


@dataclass(frozen=True)
class RunCounts:
    total: int
    by_status: dict[str, int]


def count_runs(store: StateStore, query: RunQuery = _EVERY_RUN) -> RunCounts:
    runs = store.list_runs(query)
    counts = Counter(r.status for r in runs)
    return RunCounts(total=len(runs), by_status=dict(sorted(counts.items())))


def show_run(store: StateStore, run_id: str) -> RunRecord:
    check_id(run_id)
    found = store.get_run(run_id)
    if found is None:
        raise RunNotFoundError(f'no run "{run_id}" in the store', run_id=run_id)
    return found.record


def select_prunable(
    runs: Sequence[RunSummary], *, keep_ms: int | None, keep_last: int | None, now_ms: int
) -> list[str]:
    """Terminal runs older than ``keep_ms`` and beyond the newest ``keep_last`` terminal ones.

    Never a non-terminal run; never a run whose timestamp does not parse.
    ``runs`` must be newest first.
    """
    if keep_ms is None and keep_last is None:
        raise UsageError("runs prune needs --keep DURATION and/or --keep-last N")
    terminal = [r for r in runs if r.status in TERMINAL_STATUSES]
    chosen = []
    for index, run in enumerate(terminal):
        if keep_last is not None and index < keep_last:
            continue
        if keep_ms is not None:
            created = parse_iso(run.created_at)
            if created is None or now_ms - created < keep_ms:
                continue
        chosen.append(run.id)
    return chosen


def prune_runs(
    store: StateStore,
    *,
    keep_ms: int | None,
    keep_last: int | None,
    now_ms: int,
    dry_run: bool = False,
) -> list[str]:
    """Delete (or with ``dry_run`` only select) the prunable runs; returns their ids."""
    ids = select_prunable(
        store.list_runs(RunQuery()), keep_ms=keep_ms, keep_last=keep_last, now_ms=now_ms
    )
    if not dry_run:
        for run_id in ids:
            store.delete_run(run_id)
    return ids
