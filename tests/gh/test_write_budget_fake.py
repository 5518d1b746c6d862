"""The branch store under GitHub's real write limits, on the strict fake with a simulated clock:
writes paced 1 s apart (the fake refuses sooner), a sweep that defers what its hourly budget
does not afford and a later one that finishes, the budget seeded from the branch's history
(a fresh process does not spend the same hour twice), and a GraphQL RATE_LIMITED answer
mid-sweep waited out. Nothing really sleeps: every wait advances the one clock."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from fixtures.fake_github import FakeGitHub
from tests.runs.support import approval, release_build
from zuke import execute, resume_when
from zuke._clock import ManualClock, parse_iso
from zuke._engine.run import RunOptions
from zuke.runs.continuation import ResumeOptions
from zuke.runs.sweep import resume_check_async
from zuke.runs.sweep_report import SweepReport
from zuke_gh import GitHubBranchStateStore, GitHubClient
from zuke_gh._pacing import PacingSettings, WritePacer

REPO = "acme/app"
HOUR_MS = 3_600_000


class Sim:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.waits: list[float] = []
        self.stores: list[GitHubBranchStateStore] = []  # closed at the end

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(int(seconds * 1000))


@pytest.fixture
def sim() -> Iterator[Sim]:
    made = Sim()
    yield made
    for store in made.stores:
        store.close()


@pytest.fixture
def gh(sim: Sim) -> Iterator[FakeGitHub]:
    # GitHub's limits, and the 1 s between writes enforced (refused sooner)
    with FakeGitHub.start(repos=[REPO], clock=sim.clock, write_min_gap_ms=1000) as fake:
        yield fake


class Approved:
    value = False

    def __call__(self) -> bool:
        return self.value


def store_for(gh: FakeGitHub, sim: Sim, budget: int | None) -> GitHubBranchStateStore:
    """A fresh process's store: its own client and pacer (None: unpaced)."""
    pacer = None if budget is None else WritePacer(
        PacingSettings(budget_per_hour=budget), clock=sim.clock, sleep=sim.sleep)  # fmt: skip
    client = GitHubClient(token=gh.token, base_url=gh.url, clock=sim.clock, sleep=sim.sleep,
                          pacer=pacer, notice=None)  # fmt: skip
    store = GitHubBranchStateStore(client, REPO, clock=sim.clock, sleep=sim.sleep)
    sim.stores.append(store)
    return store


def suspended_runs(gh: FakeGitHub, sim: Sim, count: int) -> tuple[Any, Approved, list[str]]:
    holder: dict[str, Any] = {"store": store_for(gh, sim, budget=500)}
    approved = Approved()
    build = release_build(None, [], gate=approval(resume_when(approved), timeout="24h"),
                          extra={"state_store": lambda self: holder["store"]})  # fmt: skip
    ids = []
    for _ in range(count):
        result = execute(build, ["release"], env={"ZUKE_ACTOR": "test"})
        assert result.status == "suspended"
        ids.append(result.run_id)
    return build, approved, ids


def sweep(build: Any, store: GitHubBranchStateStore, sim: Sim) -> SweepReport:
    options = RunOptions(env={"ZUKE_ACTOR": "sweeper"}, clock=sim.clock)
    return asyncio.run(resume_check_async(build, store, resume=ResumeOptions(), run=options))


def refused(gh: FakeGitHub) -> dict[str, int]:
    statuses = gh.stats()["statuses"]
    return {s: n for s, n in statuses.items() if s in ("403", "429")}


def test_writes_go_a_second_apart_and_the_strict_fake_refuses_none(
    gh: FakeGitHub, sim: Sim
) -> None:
    build, approved, _ids = suspended_runs(gh, sim, 2)
    assert refused(gh) == {}  # the fake refuses a write sooner than 1 s after the last
    with GitHubClient(token=gh.token, base_url=gh.url) as client:
        dates = [parse_iso(c["commit"]["committer"]["date"]) for c in client.paginate(
            "/repos/{owner}/{repo}/commits", owner="acme", repo="app",
            params={"sha": "zuke-state"})]  # fmt: skip
    assert len(dates) >= 8 and all(a - b >= 1000 for a, b in itertools.pairwise(dates))  # type: ignore[operator]
    approved.value = True
    sim.clock.advance(60_000)  # the sweep is another process, later
    report = sweep(build, store_for(gh, sim, budget=400), sim)
    assert [e.action for e in report.entries] == ["resumed", "resumed"]
    assert refused(gh) == {}, [r for r in gh.requests if r["status"] == 403]


def test_a_sweep_defers_past_its_budget_and_the_next_one_an_hour_on_finishes(
    gh: FakeGitHub, sim: Sim
) -> None:
    build, approved, ids = suspended_runs(gh, sim, 3)
    approved.value = True
    sim.clock.advance(2 * HOUR_MS)  # the setup's commits are history
    first = sweep(build, store_for(gh, sim, budget=9), sim)  # 2 resumes of 4 writes fit
    assert sorted(e.action for e in first.entries) == ["deferred", "resumed", "resumed"]
    assert first.ok and first.counts()["deferred"] == 1
    # 15 minutes later, a fresh process: the branch's commits of the last hour count
    sim.clock.advance(15 * 60_000)
    second = sweep(build, store_for(gh, sim, budget=9), sim)
    assert [e.action for e in second.entries] == ["deferred"]
    sim.clock.advance(HOUR_MS)
    third = sweep(build, store_for(gh, sim, budget=9), sim)
    assert [e.action for e in third.entries] == ["resumed"]
    store = store_for(gh, sim, budget=None)
    assert all(store.get_run(i).record.status == "succeeded" for i in ids)  # type: ignore[union-attr]
    assert refused(gh) == {}


def test_a_graphql_rate_limit_mid_sweep_is_waited_out(gh: FakeGitHub, sim: Sim) -> None:
    build, approved, _ids = suspended_runs(gh, sim, 2)
    approved.value = True
    gh.inject("/graphql", 200, times=1, retry_after=30)  # HTTP 200 + RATE_LIMITED
    before = sim.clock.now_ms()
    report = sweep(build, store_for(gh, sim, budget=400), sim)
    assert [e.action for e in report.entries] == ["resumed", "resumed"]
    assert gh.faults()[0]["hits"] == 1 and 30.0 in sim.waits
    assert sim.clock.now_ms() - before >= 30_000


def test_the_branchs_history_is_read_on_githubs_clock_whatever_the_skew(
    gh: FakeGitHub, sim: Sim
) -> None:
    """GitHub's clock two hours ahead of this machine's: the commits GitHub made in its last
    hour count, the older ones do not, and the budget's hour is this machine's."""
    gh.advance_clock(2 * 3600)
    for i in range(3):
        gh.commit_files(REPO, "zuke-state", {f"old{i}": "x"})
    gh.advance_clock(3601)  # those three are more than an hour old on GitHub's clock
    for i in range(5):
        gh.commit_files(REPO, "zuke-state", {f"new{i}": "x"})
        gh.advance_clock(60)
    store = store_for(gh, sim, budget=10)
    assert store.reserve_writes(5) and not store.reserve_writes(6)  # 5 of 10 spent
    assert store.client.pacer is not None and store.client.pacer.used() == 5
    sim.clock.advance(HOUR_MS)  # an hour on: they age out on this machine's clock too
    assert store.reserve_writes(10)


def test_a_fresh_branch_has_no_history_and_an_unreadable_one_affords_nothing(
    gh: FakeGitHub, sim: Sim
) -> None:
    store = store_for(gh, sim, budget=10)
    assert store.reserve_writes(10)  # no branch yet: 404, nothing spent
    gh.inject("/repos/*/commits", status=502, times=None)
    assert not store_for(gh, sim, budget=10).reserve_writes(1)  # a guess would be no budget
