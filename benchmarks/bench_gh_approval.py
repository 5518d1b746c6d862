"""``github_approval`` cost benchmark: what waiting for a maintainer costs on GitHub.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_gh_approval.py            # markdown
    .venv/bin/python benchmarks/bench_gh_approval.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process; every ``zuke``
command is a fresh process, as in the Action. The runs are kept where the Action keeps
them, on a ``github://`` branch store in the same repository, so the counts are the whole
of what a sweep asks GitHub: the gate's calls (issues, comments, permissions) and the
store's (GraphQL reads, commits) apart. The content-creation limit is lifted for the setup
(many releases started in seconds); nothing measured comes near it. Cases:

- **a quiet sweep** — ``--gates`` releases suspended at a ``github_approval`` gate, nobody
  has commented: one ``zuke resume --check`` (after one untimed warm-up). Target: 1 request
  per waiting gate, or a 304.
- **a comment triggers a one-run sweep** — what the Action runs on ``issue_comment``:
  ``zuke resume --check RUN_ID`` after a maintainer's ``/approve`` (the release resumes to
  its end) and after a comment that is no command; the other gates are not asked. Each
  sample is a fresh release. Target: a handful of requests.
- **a 3-day wait** — one release waits while a ``*/15`` schedule sweeps it 288 times (the
  fake's clock moves 15 minutes before each; GitHub's hourly windows pass as they would),
  then a maintainer approves and the next sweep resumes it. Reported: the requests (and how
  many were free 304s), GraphQL points, commits, and the runner time the sweeps took in all.

Times are wall seconds of a whole process, start-up included: the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fake GitHub (fixtures/)
from _timing import BenchmarkError, clean_env, dump_json, machine, machine_line, zuke_command

from fixtures.fake_github import FakeGitHub

REPO = "acme/app"
SCHEDULE_MS = 15 * 60_000
BUILD = """
    from zuke import Build, target
    from zuke_gh import github_approval, read_approval

    class Release(Build):
        @target
        def staging(self, t):
            return t.executes(lambda: None)

        @target
        def qa(self, t):
            return t.depends_on(self.staging).waits_for(lambda s: s.on(github_approval(
                lambda a: a.repo("acme/app").role("maintain"))).timeout("96h"))

        @target
        def promote(self, t):
            return t.depends_on(self.qa).executes(
                lambda ctx: print("promoted after", read_approval(ctx.state_of("qa")).approvers))
"""


@dataclass
class Cost:
    """What GitHub saw of one command (the fake's request log)."""

    gate: int = 0  # issues, comments, permissions
    gate_304: int = 0
    store: int = 0  # the branch store: GraphQL, refs, commits
    store_304: int = 0
    graphql: int = 0
    commits: int = 0
    seconds: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return self.gate + self.store

    @property
    def counted(self) -> int:
        """Requests GitHub counts against the rate limit (a 304 is free)."""
        return self.requests - self.gate_304 - self.store_304

    def add(self, other: Cost) -> None:
        for name in ("gate", "gate_304", "store", "store_304", "graphql", "commits"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seconds += other.seconds

    def as_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "counted": self.counted, "gate": self.gate,
                "gate_304": self.gate_304, "store": self.store, "store_304": self.store_304,
                "graphql": self.graphql, "commits": self.commits,
                "median_s": statistics.median(self.seconds) if self.seconds else None,
                "total_s": sum(self.seconds)}  # fmt: skip


def gate_path(path: str) -> bool:
    return path.startswith(f"/repos/{REPO}/issues") or "/collaborators/" in path


class World:
    def __init__(self, gh: FakeGitHub, root: Path) -> None:
        self.gh, self.root = gh, root
        self.env = clean_env({"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token,
                              "ZUKE_STATE": f"github://{REPO}", "ZUKE_ACTOR": "alice",
                              "GITHUB_SHA": "5f3c0ffee" * 4 + "5f3c"})  # fmt: skip

    def zuke(self, *args: str, expect: int = 0) -> tuple[str, Cost]:
        """One fresh ``zuke`` process: its output and what GitHub saw of it."""
        self.gh.reset_stats()
        started = time.perf_counter()
        proc = subprocess.run([*zuke_command(), *args], cwd=self.root, env=self.env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        elapsed = time.perf_counter() - started
        if proc.returncode != expect:
            raise BenchmarkError(f"zuke {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")  # fmt: skip
        cost = Cost(seconds=[elapsed], commits=int(self.gh.stats()["commits"]))
        for r in self.gh.requests:
            mine = gate_path(r["path"])
            cost.gate += mine
            cost.store += not mine
            cost.gate_304 += mine and r["status"] == 304
            cost.store_304 += (not mine) and r["status"] == 304
            cost.graphql += r["path"].endswith("/graphql")
        return proc.stdout, cost

    def release(self) -> tuple[str, int]:
        """A release suspended at ``qa``: its run id and its issue's number."""
        out, _ = self.zuke("promote")
        run_id = out.split("Run ", 1)[1].split()[0]
        (issue,) = [i for i in self.gh.issues(REPO) if f"run={run_id} " in (i["body"] or "")]
        return run_id, int(issue["number"])


def quiet(world: World, gates: int, runs: int) -> Cost:
    for _ in range(gates):
        world.release()
    world.zuke("resume", "--check")  # warm-up: the first sweep after the opening
    total = Cost()
    costs = [world.zuke("resume", "--check")[1] for _ in range(runs)]
    if len({(c.gate, c.gate_304, c.store, c.commits) for c in costs}) != 1:
        raise BenchmarkError(f"a quiet sweep's requests varied: {[c.as_json() for c in costs]}")
    total.add(costs[0])
    total.seconds = [s for c in costs for s in c.seconds]
    return total


def triggered(world: World, body: str, runs: int) -> Cost:
    """``zuke resume --check RUN_ID`` right after ``body`` lands on a fresh release's issue."""
    costs = []
    for _ in range(runs + 1):
        run_id, number = world.release()
        world.gh.comment(REPO, number, "maint", body)
        costs.append(world.zuke("resume", "--check", run_id)[1])
    costs = costs[1:]  # the first is a warm-up
    if len({(c.gate, c.gate_304, c.store, c.commits) for c in costs}) != 1:
        raise BenchmarkError(f"a triggered sweep's requests varied: {[c.as_json() for c in costs]}")
    first = costs[0]
    first.seconds = [s for c in costs for s in c.seconds]
    return first


def three_days(world: World, sweeps: int) -> tuple[Cost, Cost]:
    """``sweeps`` scheduled sweeps of one waiting release, then the approval's sweep."""
    _, number = world.release()
    waiting = Cost()
    for _ in range(sweeps):
        world.gh.advance_clock(SCHEDULE_MS // 1000)
        out, cost = world.zuke("resume", "--check", "--json")
        if '"still-waiting"' not in out:
            raise BenchmarkError(f"the release stopped waiting:\n{out[-1500:]}")
        waiting.add(cost)
    world.gh.advance_clock(SCHEDULE_MS // 1000)
    world.gh.comment(REPO, number, "maint", "/approve")
    out, approved = world.zuke("resume", "--check", "--json")
    if '"resumed"' not in out:
        raise BenchmarkError(f"the approval did not resume the release:\n{out[-1500:]}")
    return waiting, approved


def bench(gates: int, runs: int, sweeps: int) -> dict[str, Any]:
    limits = {"writes_per_minute": 100_000, "writes_per_hour": 100_000}
    results: dict[str, Any] = {}
    cases: tuple[tuple[str, Callable[[World], Cost]], ...] = (
        ("quiet_1", lambda w: quiet(w, 1, runs)),
        (f"quiet_{gates}", lambda w: quiet(w, gates, runs)),
        ("approve", lambda w: triggered(w, "/approve", runs)),
        ("not_a_command", lambda w: triggered(w, "LGTM, thanks!", runs)),
    )
    for name, make in cases:
        with tempfile.TemporaryDirectory(prefix="zuke-bench-approval-") as tmp, \
                FakeGitHub.start(repos=[REPO], **limits) as gh:  # fmt: skip
            world = setup(gh, Path(tmp))
            if name in ("approve", "not_a_command"):
                for _ in range(gates - 1):  # other releases wait too: a one-run sweep skips them
                    world.release()
            results[name] = make(world)
    with tempfile.TemporaryDirectory(prefix="zuke-bench-approval-") as tmp, \
            FakeGitHub.start(repos=[REPO], **limits) as gh:  # fmt: skip
        results["three_days"], results["three_days_approved"] = three_days(
            setup(gh, Path(tmp)), sweeps
        )
    return results


def setup(gh: FakeGitHub, root: Path) -> World:
    for login, role in (("alice", "admin"), ("maint", "maintain")):
        gh.add_user(login)
        gh.set_permission(REPO, login, role)
    (root / "build.py").write_text(textwrap.dedent(BUILD))
    return World(gh, root)


def markdown(results: dict[str, Any], gates: int, runs: int, sweeps: int) -> str:
    def row(label: str, c: Cost, target: str) -> str:
        med = statistics.median(c.seconds)
        return (f"| {label} | {c.gate} ({c.gate_304} × 304) | {c.store} ({c.store_304} × 304) "
                f"| {c.graphql} | {c.commits} | {target} | {med:.3f} s |")  # fmt: skip

    lines = [
        f"Fresh processes on a `github://` store; median of {runs} (the 3-day rows: of "
        f"{sweeps} sweeps).",
        "",
        "| case | gate requests | store requests | GraphQL | commits | target | median |",
        "| --- | ---: | ---: | ---: | ---: | --- | ---: |",
        row("quiet sweep, 1 gate waiting", results["quiet_1"], "1 (or a 304)"),
        row(f"quiet sweep, {gates} gates waiting", results[f"quiet_{gates}"], f"{gates} (304s)"),
        row(
            "`/approve` → `resume --check RUN_ID` (resumes to the end)",
            results["approve"],
            "a handful",
        ),
        row(
            "a comment that is no command → `resume --check RUN_ID`",
            results["not_a_command"],
            "a handful",
        ),
    ]
    waited: Cost = results["three_days"]
    approved: Cost = results["three_days_approved"]
    hours = sweeps * SCHEDULE_MS / 3_600_000
    lines += [
        "",
        f"A {hours:.0f}-hour wait, {sweeps} sweeps at 15 minutes, then the approval:",
        "",
        "| | requests | of which 304 (free) | counted | GraphQL | commits | runner time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {sweeps} waiting sweeps | {waited.requests} | {waited.gate_304 + waited.store_304} | "
        f"{waited.counted} | {waited.graphql} | {waited.commits} | {sum(waited.seconds):.1f} s |",
        f"| the approving sweep | {approved.requests} | {approved.gate_304 + approved.store_304} "
        f"| {approved.counted} | {approved.graphql} | {approved.commits} | "
        f"{sum(approved.seconds):.1f} s |",
        "",
        f"Per sweep while waiting: {waited.requests / sweeps:.2f} requests "
        f"({waited.counted / sweeps:.2f} counted), median {statistics.median(waited.seconds):.3f} "
        f"s; per hour: {waited.counted / hours:.1f} counted requests.",
    ]
    lines += ["", machine_line()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed samples per case")
    parser.add_argument("--gates", type=int, default=10, help="releases waiting at once")
    parser.add_argument("--sweeps", type=int, default=288, help="sweeps of the long wait")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    before = machine()["loadavg"]
    results = bench(args.gates, args.runs, args.sweeps)
    if args.json:
        print(dump_json({"machine": machine(), "loadavg_before": before, "gates": args.gates,
                         "sweeps": args.sweeps,
                         "results": {k: v.as_json() for k, v in results.items()}}))  # fmt: skip
    else:
        print(f"load average before: {before}")
        print(markdown(results, args.gates, args.runs, args.sweeps))


if __name__ == "__main__":
    main()
