"""Write budget benchmark: 100 waiting releases resumed under GitHub's real write limits.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_gh_write_budget.py            # markdown
    .venv/bin/python benchmarks/bench_gh_write_budget.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process and enforces
GitHub's content-creation limits: 80 writes a minute, 500 an hour per token, and
at least 1 s between writes (``write_min_gap_ms``), each refused with a 403 and
``retry-after``. Its clock is **simulated**: one manual clock is GitHub's clock,
the engine's and the client's, and every wait (the pacer's second between writes,
a rate limit) advances it instead of sleeping — so hours of GitHub time take a
minute of wall time. The state is a ``github://`` branch store.

Setup (limits lifted, then the clock moved two hours on so nothing of it counts):
100 runs of a release, each suspended at a ``github_workflow`` gate (``e2e.yml``),
and every dispatched workflow run then completed ``success``.

Then one sweep every 15 simulated minutes (a ``*/15`` schedule), each a fresh
store, client and pacer as a fresh process would have (the pacer seeded from
the branch's commits of the last hour), until no run is left suspended.
Reported: per sweep, the runs resumed and deferred, the writes and requests it
made (GraphQL ones apart), and its simulated and wall time; in all, how many
sweeps, the commits per resume, and whether any release failed or was lost
(the benchmark fails if one did). Then the cost of an idle sweep (gates still
waiting), from which the GraphQL points an hour at a 15-minute schedule plus
``workflow_run`` triggers are computed (a query costs at least 1 point,
docs.github.com "Rate limits and query limits for the GraphQL API").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fake GitHub (fixtures/)
from _timing import BenchmarkError, dump_json, machine, machine_line

from fixtures.fake_github import FakeGitHub
from zuke import Build, execute, target
from zuke._clock import ManualClock
from zuke._engine.run import RunOptions
from zuke.runs.continuation import ResumeOptions
from zuke.runs.sweep import resume_check_async
from zuke.runs.sweep_report import SweepReport
from zuke_gh import GitHubBranchStateStore, GitHubClient, github_workflow
from zuke_gh._pacing import PacingSettings, WritePacer

RELEASES = 100
REPO = "acme/app"
SCHEDULE_MS = 15 * 60_000


class SimTime:
    """The one simulated clock: a wait advances it (nothing sleeps)."""

    def __init__(self) -> None:
        self.clock = ManualClock(time.time_ns() // 1_000_000)  # starts at the real time
        self.slept_s = 0.0

    def sleep(self, seconds: float) -> None:
        self.slept_s += seconds
        self.clock.advance(int(seconds * 1000))


@dataclass
class World:
    gh: FakeGitHub
    sim: SimTime
    env: dict[str, str]
    client: GitHubClient | None = None  # the current "process's" client
    store: GitHubBranchStateStore | None = None
    made: list[GitHubClient] = field(default_factory=list)

    def current(self) -> GitHubClient:
        assert self.client is not None
        return self.client

    def new_process(self, *, paced: bool) -> GitHubBranchStateStore:
        """A fresh client, pacer and store, as a new sweep process has."""
        pacer = WritePacer(PacingSettings(), clock=self.sim.clock, sleep=self.sim.sleep)
        self.client = GitHubClient(token=self.gh.token, base_url=self.gh.url,
                                   clock=self.sim.clock, sleep=self.sim.sleep,
                                   pacer=pacer if paced else None, notice=None)  # fmt: skip
        self.made.append(self.client)
        self.store = GitHubBranchStateStore(self.client, REPO, clock=self.sim.clock,
                                            sleep=self.sim.sleep)  # fmt: skip
        return self.store


def release_build(world: World) -> type[Build]:
    class Release(Build):
        def state_store(self) -> Any:
            return world.store

        @target
        def e2e(self, t: Any) -> Any:
            return t.waits_for(lambda s: s.on(github_workflow(
                lambda g: g.repo(REPO).workflow("e2e.yml").ref("main")
                .client(world.current))).timeout("24h"))  # fmt: skip

        @target
        def ship(self, t: Any) -> Any:
            return t.depends_on(self.e2e).executes(lambda: None)

    return Release


@dataclass(frozen=True)
class Sweep:
    number: int
    at_min: float  # simulated minutes since the first sweep
    resumed: int
    deferred: int
    still_waiting: int
    failed: int
    writes: int
    commits: int
    requests: int
    graphql: int
    sim_s: float
    wall_s: float


def _writes(gh: FakeGitHub) -> int:
    """Content-creating requests since ``reset_stats``: commits (GraphQL mutations) and REST
    writes (a gate's dispatch, a tag)."""
    rest = sum(1 for r in gh.state.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")
               and "graphql" not in r.endpoint and r.status < 400)  # fmt: skip
    return int(gh.state.commits) + rest


def sweep(world: World, build: type[Build], number: int, first_ms: int) -> Sweep:
    gh, sim = world.gh, world.sim
    store = world.new_process(paced=True)
    gh.reset_stats()
    commits0 = gh.state.commits
    began_ms, began = sim.clock.now_ms(), time.perf_counter()
    report: SweepReport = asyncio.run(resume_check_async(
        build, store, resume=ResumeOptions(),
        run=RunOptions(env=world.env, clock=sim.clock)))  # fmt: skip
    wall = time.perf_counter() - began
    stats = gh.stats()
    graphql = sum(n for name, n in stats["endpoints"].items() if "graphql" in name)
    c = report.counts()
    return Sweep(number, (began_ms - first_ms) / 60_000, c["resumed"], c["deferred"],
                 c["still_waiting"], c["failed"], _writes(gh) - commits0,
                 gh.state.commits - commits0, int(stats["requests"]), graphql,
                 (sim.clock.now_ms() - began_ms) / 1000, wall)  # fmt: skip


def setup(world: World, build: type[Build]) -> list[str]:
    """``RELEASES`` runs suspended at ``e2e`` (limits lifted), their workflows then done."""
    gh = world.gh
    gh.configure(writes_per_minute=100_000, writes_per_hour=100_000, write_min_gap_ms=0)
    world.new_process(paced=False)
    ids = []
    for _ in range(RELEASES):
        result = execute(build, ["ship"], env=world.env)
        if result.status != "suspended":
            raise BenchmarkError(f"a setup run ended {result.status}, not suspended")
        ids.append(result.run_id)
    gh.controller.limits.writes.clear()
    world.sim.clock.advance(2 * 3_600_000)  # the setup's writes are history now
    gh.configure(writes_per_minute=80, writes_per_hour=500, write_min_gap_ms=1000)
    return ids


def idle_sweeps(world: World, build: type[Build]) -> list[Sweep]:
    """Two sweeps while every workflow is still queued: the first notes each gate's new
    detail (a commit per run), the second is the steady state (nothing changed)."""
    out = []
    for n in (1, 2):
        world.sim.clock.advance(SCHEDULE_MS)
        s = sweep(world, build, n, world.sim.clock.now_ms())
        if s.still_waiting != RELEASES:
            raise BenchmarkError(f"idle sweep {n} did not leave every run waiting: {s}")
        out.append(s)
    for run in world.gh.dispatched(REPO):
        world.gh.complete_run(run["id"], "success")
    world.sim.clock.advance(2 * 3_600_000)  # the idle sweeps' writes are history now
    return out


def bench() -> dict[str, Any]:
    sim = SimTime()
    env = {"ZUKE_ACTOR": "bench"}
    with FakeGitHub.start(repos=[REPO], clock=sim.clock) as gh:
        gh.add_workflow(REPO, "e2e.yml", inputs={"zuke_marker": {"required": False}},
                        run_name="${{ inputs.zuke_marker }}", jobs=["unit", "e2e"])  # fmt: skip
        world = World(gh, sim, env)
        build = release_build(world)
        ids = setup(world, build)
        idle = idle_sweeps(world, build)
        sweeps: list[Sweep] = []
        first_ms = sim.clock.now_ms()
        began = time.perf_counter()
        while True:
            s = sweep(world, build, len(sweeps) + 1, first_ms)
            sweeps.append(s)
            if s.failed:
                raise BenchmarkError(f"sweep {s.number}: {s.failed} release(s) failed")
            if s.deferred == 0 and s.still_waiting == 0:
                break
            if len(sweeps) > 40:
                raise BenchmarkError("more than 40 sweeps and releases are still suspended")
            now = sim.clock.now_ms()
            sim.clock.advance(first_ms + len(sweeps) * SCHEDULE_MS - now if
                              now < first_ms + len(sweeps) * SCHEDULE_MS else 0)  # fmt: skip
        wall = time.perf_counter() - began
        simulated = (sim.clock.now_ms() - first_ms) / 60_000
        statuses = {i: world.store.get_run(i) for i in ids}  # type: ignore[union-attr]
        lost = [i for i, found in statuses.items() if found is None]
        bad = [i for i, f in statuses.items() if f is not None and f.record.status != "succeeded"]
        if lost or bad:
            raise BenchmarkError(f"lost {len(lost)}, not succeeded {len(bad)}")
        for client in world.made:
            client.close()
    resumed = sum(s.resumed for s in sweeps)
    commits = sum(s.commits for s in sweeps)
    return {"releases": RELEASES, "sweeps": [s.__dict__ for s in sweeps],
            "resumed": resumed, "commits_per_resume": commits / resumed,
            "writes_per_resume": sum(s.writes for s in sweeps) / resumed,
            "wall_s": wall, "simulated_min": simulated,
            "idle": [s.__dict__ for s in idle]}  # fmt: skip


def points_an_hour(result: dict[str, Any], triggers: int) -> tuple[int, int]:
    """GraphQL points an hour with every release waiting: 4 scheduled sweeps plus
    ``triggers`` ``workflow_run`` sweeps at the steady idle sweep's cost, and at most what
    the write budget lets resumes add (1 point a request: the store's queries open no
    connection, and a call's minimum is 1 point)."""
    idle = result["idle"][1]["graphql"]
    busy = result["sweeps"][0]
    per_resume = busy["graphql"] / max(busy["resumed"], 1)
    budget_resumes = 400 / result["writes_per_resume"]
    return (4 + triggers) * idle, round((4 + triggers) * idle + budget_resumes * per_resume)


def markdown(result: dict[str, Any]) -> str:
    lines = [
        f"{result['releases']} releases suspended at a `github_workflow` gate, every workflow "
        "done; one sweep every 15 simulated minutes under 80 writes/min, 500/h, 1 s apart "
        "(a simulated clock: no sweep sleeps).",
        "",
        "| sweep | at (min) | resumed | deferred | writes | commits | requests | GraphQL | "
        "simulated (s) | wall (s) |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in result["sweeps"]:
        lines.append(f"| {s['number']} | {s['at_min']:.0f} | {s['resumed']} | {s['deferred']} | "
                     f"{s['writes']} | {s['commits']} | {s['requests']} | {s['graphql']} | "
                     f"{s['sim_s']:.0f} | {s['wall_s']:.1f} |")  # fmt: skip
    lines += [
        "",
        f"All {result['resumed']} resumed in {len(result['sweeps'])} sweeps "
        f"({result['simulated_min']:.0f} simulated minutes, {result['wall_s']:.0f} s wall); "
        f"{result['commits_per_resume']:.2f} commits and {result['writes_per_resume']:.2f} "
        "writes per resume; none failed or lost.",
        "",
        f"Idle sweeps, all {result['releases']} gates waiting (queued workflows):",
        "",
        "| idle sweep | requests | GraphQL | writes | wall (s) |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in result["idle"]:
        lines.append(f"| {s['number']} | {s['requests']} | {s['graphql']} | {s['writes']} | "
                     f"{s['wall_s']:.1f} |")  # fmt: skip
    lines.append("")
    for triggers in (0, 4, 20):
        idle, most = points_an_hour(result, triggers)
        lines.append(f"GraphQL points an hour, 4 scheduled + {triggers} workflow_run sweeps: "
                     f"{idle} idle; at most {most} with resumes filling the write "
                     "budget.")  # fmt: skip
    lines += ["", machine_line()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument("--releases", type=int, default=100, help="waiting releases")
    args = parser.parse_args()
    global RELEASES
    RELEASES = args.releases
    os.environ.pop("ZUKE_GITHUB_WRITES_PER_HOUR", None)
    result = bench()
    print(dump_json({"machine": machine(), **result}) if args.json else markdown(result))


if __name__ == "__main__":
    main()
