"""Branch-store benchmark: GitHub requests, commits and wall time on the fake GitHub (loopback).

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_branch_store.py            # markdown
    .venv/bin/python benchmarks/bench_branch_store.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process on
127.0.0.1 with its content-creation limit lifted (the store-level row would
otherwise wait out GitHub's 80 commits a minute). Two views of one run —
created, 100 target transitions, suspended at a gate, then a sweep resumes it
to its end:

- **store calls**: every transition its own ``put_run`` (what a store that is
  not ``checkpointed`` would be asked for): the per-write cost;
- **the engine**: a 100-target chain ending in a ``resume_when`` gate, run by
  ``zuke.execute`` on the branch store (``checkpointed``: transitions coalesce
  into the durability points), then ``resume_check_async`` with the gate
  satisfied — what ``zuke resume --check`` does in the sweep job.

Counts come from the fake's request log and commit counter (the same in every
sample); times are the median of ``--runs`` after one warm-up, each on a fresh
repository.

- **at scale** (``--finished``, default 10,000 finished runs, and ``--waiting``,
  100 suspended): the branch is seeded straight into the fake's git objects in
  the store's own layout (one commit, no requests), then a fresh store per
  case lists: the sweep's query (``status=suspended``: ``active.json`` alone),
  ``zuke runs list`` with no ``--limit`` (the CLI's default: every run), and
  with ``--limit 20`` and ``--limit 1000``; and the sweep's reads (the listing,
  then every waiting run's record, which the store reads together in batched
  queries). ``Blob.text`` is cut at GitHub's 512,000 bytes, as on github.com.

GraphQL requests are counted apart: each costs 1 point of the token's hourly
budget (the store's queries open no connection; GitHub docs, "Rate limits and
query limits for the GraphQL API").
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fake GitHub (fixtures/)
from _timing import dump_json, machine

from fixtures.fake_github import FakeGitHub
from zuke import Build, resume_when, target
from zuke._clock import iso
from zuke._engine.run import RunOptions, execute_async
from zuke._target import TargetBuilder
from zuke.runs.sweep import resume_check_async
from zuke.state._protocol import LockAcquired, LockHolder, RunQuery, Written
from zuke.state.records import RunRecord, TargetRecord
from zuke.testing.store_contract import sample_record
from zuke_gh import GitHubClient
from zuke_gh._branch_files import README_PATH, README_TEXT, record_bytes, run_path
from zuke_gh._branch_index import ACTIVE_PATH, active_bytes, index_entry, migrate, parse_active
from zuke_gh.branch_store import GitHubBranchStateStore

REPO = "acme/app"
TARGETS = 100
UNLIMITED = {"rate_limit": 10**9, "writes_per_minute": 10**9, "writes_per_hour": 10**9}


@dataclass(frozen=True)
class Row:
    case: str
    requests: int
    not_modified: int
    graphql: int
    commits: int
    median_s: float
    min_s: float
    max_s: float


Cost = tuple[int, int, int, int, float]


class Meter:
    """(requests, of which 304, GraphQL requests, commits, seconds) since the last reading."""

    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.reset()

    def reset(self) -> None:
        self.gh.reset_stats()
        self.mark = time.perf_counter()

    def take(self) -> Cost:
        elapsed = time.perf_counter() - self.mark
        stats = self.gh.stats()
        self.reset()
        graphql = sum(n for name, n in stats["endpoints"].items() if "graphql" in name)
        return (int(stats["requests"]), int(stats["not_modified"]), graphql,
                int(stats["commits"]), elapsed)  # fmt: skip


def _store(gh: FakeGitHub) -> GitHubBranchStateStore:
    return GitHubBranchStateStore(GitHubClient(token=gh.token, base_url=gh.url), REPO)


def store_calls(gh: FakeGitHub, workdir: Path) -> dict[str, Cost]:
    """Each phase's (requests, 304s, commits) when every transition is one write."""
    out: dict[str, Cost] = {}
    meter = Meter(gh)
    with _store(gh) as store:
        names = tuple(f"t{i}" for i in range(TARGETS))
        record = sample_record("bench-run", targets=names)
        meter.reset()  # the store's requests, not making its HTTP client (~15 ms of TLS set-up)
        written = store.create_run(record)
        assert isinstance(written, Written)
        out["create a run (its first write also makes the branch)"] = meter.take()
        version = written.version
        for i, name in enumerate(names):
            rows = dict(record.targets)
            rows[name] = TargetRecord(status="succeeded" if i % 2 else "running")
            record = replace(record, targets=rows)
            put = store.put_run(record, expected_version=version)
            assert isinstance(put, Written)
            version = put.version
        out[f"{TARGETS} target transitions"] = meter.take()
        put = store.put_run(replace(record, status="suspended"), expected_version=version)
        assert isinstance(put, Written)
        out["suspend"] = meter.take()
    with _store(gh) as sweeper:  # a fresh process's store: no view of the branch yet
        meter.reset()
        [summary] = sweeper.list_runs()
        found = sweeper.get_run(summary.id)
        assert found is not None
        lease = sweeper.acquire_lock(f"zuke-run-{summary.id}", _holder(summary.id), 600_000)
        assert isinstance(lease, LockAcquired)
        done = sweeper.put_run(replace(found.record, status="succeeded"),
                               expected_version=found.version)  # fmt: skip
        assert isinstance(done, Written)
        sweeper.release_lock(f"zuke-run-{summary.id}", lease.token)
        out["sweep (list, read, lease, end, release)"] = meter.take()
    return out


def _holder(run_id: str) -> LockHolder:
    return LockHolder(actor="bench", run_id=run_id, since="2026-12-01T00:00:00.000Z")


def engine_build(flag: Path, store: GitHubBranchStateStore) -> type[Build]:
    namespace: dict[str, Any] = {"state_store": lambda self: store}
    for i in range(TARGETS):

        def define(self: Build, t: TargetBuilder, i: int = i) -> TargetBuilder:
            t = t.executes(lambda: None)
            return t.depends_on(getattr(self, f"t{i - 1}")) if i else t

        define.__name__ = f"t{i}"
        namespace[f"t{i}"] = target(define)

    def gate(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(getattr(self, f"t{TARGETS - 1}")).waits_for(
            lambda s: s.on(resume_when(flag.exists))
        )

    gate.__name__ = "gate"
    namespace["gate"] = target(gate)
    return type("Chain", (Build,), namespace)


def engine(gh: FakeGitHub, workdir: Path) -> dict[str, Cost]:
    out: dict[str, Cost] = {}
    meter = Meter(gh)
    flag = workdir / "ready"
    with _store(gh) as store:
        store.list_runs()
        meter.reset()
        build = engine_build(flag, store)
        result = asyncio.run(execute_async(build, RunOptions(targets=["gate"], env={}, state=True)))
        assert result.status == "suspended", result.status
        out[f"engine: create, {TARGETS} targets, suspend"] = meter.take()
    flag.touch()
    with _store(gh) as sweeper:
        build = engine_build(flag, sweeper)
        report = asyncio.run(resume_check_async(build, sweeper, run=RunOptions(env={})))
        assert [entry.action for entry in report.entries] == ["resumed"], report
        out["engine: sweep resumes it to its end"] = meter.take()
    return out


SCALE = {"finished": 10_000, "waiting": 100}


def _scaled(n: int, status: str) -> RunRecord:
    """Run ``n`` of the seeded history, created ``n`` minutes after the first."""
    at = iso(1_767_225_600_000 + n * 60_000)  # 2026-01-01T00:00:00Z + n minutes
    names = tuple(f"t{i}" for i in range(10))
    base = sample_record(f"run-{status[:3]}-{n:05d}", targets=names)
    return replace(base, status=status, created_at=at, updated_at=at)  # type: ignore[arg-type]


def seed(gh: FakeGitHub, finished: int, waiting: int) -> None:
    """The store's own layout for ``finished`` + ``waiting`` runs, in one uncounted commit."""
    records = [_scaled(n, "succeeded") for n in range(finished)]
    records += [_scaled(finished + n, "suspended") for n in range(waiting)]
    files: dict[str, str | None] = {run_path(r.id): record_bytes(r).decode() for r in records}
    index = migrate({r.id: index_entry(r) for r in records})
    fresh = replace(parse_active(index[ACTIVE_PATH].decode()), legacy_runs=False)
    index[ACTIVE_PATH] = active_bytes(fresh)
    files.update({p: d.decode() for p, d in index.items()})
    files[README_PATH] = README_TEXT
    gh.commit_files(REPO, "zuke-state", files, "seeded")


def at_scale(gh: FakeGitHub, workdir: Path) -> dict[str, Cost]:
    finished, waiting = SCALE["finished"], SCALE["waiting"]
    seed(gh, finished, waiting)
    out: dict[str, Cost] = {}
    meter = Meter(gh)
    cases = [
        ("the sweep's listing (status=suspended)", RunQuery(status="suspended"), waiting),
        ("runs list (no --limit: every run)", RunQuery(), finished + waiting),
        ("runs list --limit 20", RunQuery(limit=20), 20),
        ("runs list --limit 1000", RunQuery(limit=1000), 1000),
    ]
    for name, query, expected in cases:
        with _store(gh) as store:  # a fresh process each: no view, no cache
            meter.reset()
            found = store.list_runs(query)
            assert len(found) == expected, (name, len(found))
            out[f"{finished:,} finished + {waiting} waiting: {name}"] = meter.take()
    with _store(gh) as store:  # what a sweep reads: the listing, then each waiting record
        meter.reset()
        listed = store.list_runs(RunQuery(status="suspended"))
        assert all(store.get_run(s.id) is not None for s in listed) and len(listed) == waiting
        out[f"{finished:,} finished + {waiting} waiting: the sweep's reads "
            "(listing + every waiting record)"] = meter.take()  # fmt: skip
    return out


def measure(kind: Callable[[FakeGitHub, Path], dict[str, Cost]], runs: int) -> list[Row]:
    samples: dict[str, list[float]] = {}
    counts: dict[str, Cost] = {}
    for attempt in range(runs + 1):  # the first is a warm-up
        with FakeGitHub.start(repos=[REPO], **UNLIMITED) as gh, tempfile.TemporaryDirectory() as d:
            phases = kind(gh, Path(d))
        for name, cost in phases.items():
            counts[name] = cost
            if attempt:
                samples.setdefault(name, []).append(cost[4])
    return [
        Row(name, *counts[name][:4], statistics.median(t), min(t), max(t))
        for name, t in samples.items()
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--finished", type=int, default=SCALE["finished"])
    parser.add_argument("--waiting", type=int, default=SCALE["waiting"])
    args = parser.parse_args()
    SCALE.update(finished=args.finished, waiting=args.waiting)
    rows: list[Row] = []
    for kind in (store_calls, engine, at_scale):
        rows += measure(kind, args.runs)
    if args.json:
        dump_json({"machine": machine(), "rows": [r.__dict__ for r in rows]})
        return
    print(f"Machine: {machine()}\n")
    print("| case | requests | of which 304 | GraphQL | commits | median | min | max |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        times = " | ".join(f"{t * 1000:.1f} ms" for t in (r.median_s, r.min_s, r.max_s))
        print(f"| {r.case} | {r.requests} | {r.not_modified} | {r.graphql} | {r.commits} | "
              f"{times} |")  # fmt: skip


if __name__ == "__main__":
    main()
