"""Release dashboard benchmark: requests and writes of one dashboard step with 100 releases
waiting, on the branch store (what the Action uses).

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_gh_dashboard.py            # markdown
    .venv/bin/python benchmarks/bench_gh_dashboard.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process. The branch store
(``github://acme/app?branch=zuke-state``) holds 100 runs suspended at an approval gate
(each with its approval issue's number and the gate's words) and 5 finished ones, written
through the store itself. Each case is one :func:`zuke_gh.dashboard.keep_dashboard` with a
fresh client and store, as a fresh ``python -m zuke_gh.dashboard`` process would run:

- **first sweep** — no dashboard yet: it is opened and pinned;
- **nothing changed** — a later sweep (its clock 15 minutes on): no write;
- **one release finished** — one record changed since: one edit;
- **100 copies by others** — 100 issues with the dashboard's marker and label, opened by
  someone else, before the first sweep: none adopted.

Reported: the fake's requests for the step, split into reads (REST ``GET``, GraphQL
queries; how many of them a conditional ``304`` answered, which GitHub does not count
against the rate limit) and writes (REST ``POST``/``PATCH``, GraphQL mutations), and the wall
time, median of ``--runs`` repetitions of the *nothing changed* case (the others change
state, so they run once). No peer keeps such a page (see docs/benchmarks.md), so nothing is paired.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fake GitHub (fixtures/)
from _timing import machine_line

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import BRANCH, add_main_branch
from zuke._clock import ManualClock, iso
from zuke.state.records import RunRecord, TargetRecord, WaitingFor
from zuke_gh import GitHubBranchStateStore, GitHubClient
from zuke_gh._dashboard_view import marker
from zuke_gh._pacing import is_mutation
from zuke_gh.dashboard import DashboardOutcome, keep_dashboard

REPO = "acme/app"
WAITING = 100
START = 1_800_000_000_000


@dataclass(frozen=True)
class Case:
    name: str
    action: str
    reads: int
    not_modified: int  # of the reads: conditional, answered 304 (GitHub does not bill them)
    writes: int
    seconds: tuple[float, ...]

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1000


def waiting(n: int) -> RunRecord:
    at = iso(START + n * 1000)
    why = WaitingFor(trigger=f"github-approval:{REPO}", deadline=iso(START + 86_400_000),
                     detail=f"github_approval {REPO}#{n + 1}: 0 of 2 approvals; waiting for "
                     "/approve from maintain or higher")  # fmt: skip
    gate = TargetRecord(status="waiting", started_at=at, waiting_for=why,
                        meta={"repo": REPO, "issue": n + 1})  # fmt: skip
    return RunRecord(id=f"r-{n:03d}", build="Release", root_target="promote", status="suspended",
                     actor="alice", created_at=at, updated_at=at,
                     params={"version": f"1.{n}.0", "channel": "stable"},
                     targets={"staging": TargetRecord(status="succeeded"), "qa": gate})  # fmt: skip


def store_of(gh: FakeGitHub) -> GitHubBranchStateStore:
    client = GitHubClient(token=gh.token, base_url=gh.url, pacer=None)
    return GitHubBranchStateStore(client, REPO, branch=BRANCH)


def counted(gh: FakeGitHub, clock_ms: int) -> tuple[DashboardOutcome, int, int, int, float]:
    gh.reset_stats()
    started = time.perf_counter()
    with store_of(gh) as store, GitHubClient(token=gh.token, base_url=gh.url, pacer=None) as c:
        done = keep_dashboard(store, c, REPO, job_url=f"https://github.com/{REPO}/actions/runs/1",
                              clock=ManualClock(clock_ms))  # fmt: skip
    took = time.perf_counter() - started
    writes = sum(1 for r in gh.requests if _write(r))
    free = sum(1 for r in gh.requests if r["status"] == 304)
    return done, len(gh.requests) - writes, free, writes, took


def _write(r: dict[str, Any]) -> bool:
    if r["path"].endswith("/graphql"):
        return is_mutation(str(json.loads(r["body"]).get("query", "")))
    return bool(r["method"] != "GET")


def seed(gh: FakeGitHub) -> None:
    """The runs, written through the store (GitHub's write limits lifted while seeding, then
    put back: the clock stands still)."""
    add_main_branch(gh)
    gh.configure(writes_per_minute=10_000, writes_per_hour=10_000)
    with store_of(gh) as store:
        store.initialize()
        for n in range(WAITING):
            store.create_run(waiting(n))
        for n in range(5):
            at = iso(START + 3_600_000 + n)
            store.create_run(RunRecord(id=f"f-{n}", build="Release", root_target="promote",
                                       status="succeeded", actor="alice", created_at=at,
                                       updated_at=at))  # fmt: skip
    gh.configure(writes_per_minute=80, writes_per_hour=500)
    gh.advance_clock(3600)  # the seed's writes out of the hour


def bench(runs: int) -> list[Case]:
    cases = []
    with FakeGitHub.start(clock=ManualClock(START), repos=[REPO]) as gh:
        gh.add_user("mallory")
        seed(gh)
        done, reads, free, writes, took = counted(gh, START)
        cases.append(Case("first sweep", done.action, reads, free, writes, (took,)))
        samples, last = [], None
        for _ in range(runs):
            last = counted(gh, START + 900_000)
            samples.append(last[4])
        assert last is not None
        cases.append(Case("nothing changed", last[0].action, last[1], last[2], last[3],
                          tuple(samples)))  # fmt: skip
        with store_of(gh) as store:
            found = store.get_run("r-000")
            assert found is not None
            ended = RunRecord(id="r-000", build="Release", root_target="promote",
                              status="succeeded", actor="alice", created_at=iso(START),
                              updated_at=iso(START + 7_200_000))  # fmt: skip
            store.put_run(ended, expected_version=found.version)
        done, reads, free, writes, took = counted(gh, START + 1_800_000)
        cases.append(Case("one release finished", done.action, reads, free, writes, (took,)))
    with FakeGitHub.start(clock=ManualClock(START), repos=[REPO]) as gh:
        gh.add_user("mallory")
        gh.set_permission(REPO, "mallory", "triage")  # her label sticks
        seed(gh)
        for n in range(100):
            gh.open_issue(REPO, "zuke: releases waiting", login="mallory", labels=["zuke"],
                          body=f"{marker(REPO)}\ncopy {n}")  # fmt: skip
        done, reads, free, writes, took = counted(gh, START)
        cases.append(Case("100 copies by others", done.action, reads, free, writes, (took,)))
    return cases


def markdown(cases: list[Case]) -> str:
    lines = [f"Dashboard step, {WAITING} releases waiting (+5 finished), branch store, "
             "fake GitHub in-process", "",
             "| case | action | reads (of which 304) | writes | wall time (median) |",
             "| --- | --- | ---: | ---: | ---: |"]  # fmt: skip
    for c in cases:
        lines.append(f"| {c.name} | {c.action} | {c.reads} ({c.not_modified}) | {c.writes} | "
                     f"{c.median_ms:.0f} ms (n={len(c.seconds)}) |")  # fmt: skip
    lines += ["", machine_line()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    cases = bench(args.runs)
    if args.json:
        print(json.dumps([{"case": c.name, "action": c.action, "reads": c.reads,
                           "not_modified": c.not_modified, "writes": c.writes,
                           "median_ms": round(c.median_ms, 1)}
                          for c in cases], indent=2))  # fmt: skip
    else:
        print(markdown(cases))


if __name__ == "__main__":
    main()
