"""``github_approval`` cost benchmark: what waiting for a maintainer costs on GitHub.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_gh_approval.py            # markdown
    .venv/bin/python benchmarks/bench_gh_approval.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process; every ``zuke``
command is a fresh process, as in the Action, **with fresh tokens**: each Actions job gets a
new ``GITHUB_TOKEN``, and GitHub's ETags are per token, so no request is a free 304 across
jobs (the fake scopes ETags to the token, as GitHub does). The runs are kept where the Action
keeps them, on a ``github://`` branch store in the same repository; the gate gets a token of
its own (its client is a module-level factory reading ``GATE_TOKEN``), so its share — requests
and GraphQL points — is told apart from the store's by token. The content-creation limit is
lifted for the setup (many releases started in seconds); nothing measured comes near it.
Cases:

- **an idle sweep** — ``--gates`` releases (100 by default) suspended at a
  ``github_approval`` gate, nobody has commented: one ``zuke resume --check``. Target: the
  gates' share is at most 2 requests (1 GraphQL point) a sweep, however many gates wait
  (GITHUB_TOKEN has 1,000 requests and 1,000 points an hour per repository).
- **a comment triggers a one-run sweep** — what the Action runs on ``issue_comment``:
  ``zuke resume --check RUN_ID`` after a maintainer's ``/approve`` (the release resumes to
  its end) and after a comment that is no command. Each sample is a fresh release. Target: a
  handful of requests.
- **a 3-day wait** — one release waits while a schedule sweeps it 288 times (the fake's clock
  moves 15 minutes before each; GitHub's hourly windows pass as they would), then a
  maintainer approves and the next sweep resumes it. Reported: requests, GraphQL points and
  commits, the gate's and the store's, and the runner time the sweeps took in all.

Times are wall seconds of a whole process, start-up included: the median of ``--runs``.
"""

from __future__ import annotations

import argparse
import itertools
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
    import os

    from zuke import Build, target
    from zuke_gh import GitHubClient, github_approval, read_approval


    def gate_client():
        # the gate's own token (GATE_TOKEN): its requests are told apart from the store's
        return GitHubClient.from_env({**os.environ, "GH_TOKEN": os.environ["GATE_TOKEN"]})


    class Release(Build):
        @target
        def staging(self, t):
            return t.executes(lambda: None)

        @target
        def qa(self, t):
            return t.depends_on(self.staging).waits_for(lambda s: s.on(github_approval(
                lambda a: a.repo("acme/app").role("maintain").client(gate_client)
            )).timeout("96h"))

        @target
        def promote(self, t):
            return t.depends_on(self.qa).executes(
                lambda ctx: print("promoted after", read_approval(ctx.state_of("qa")).approvers))
"""


@dataclass
class Cost:
    """What GitHub saw of one command (the fake's request log), the gate's and the store's."""

    gate: int = 0
    gate_points: int = 0
    gate_304: int = 0
    store: int = 0
    store_points: int = 0
    store_304: int = 0
    commits: int = 0
    seconds: list[float] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return self.gate + self.store

    @property
    def counted(self) -> int:
        """Requests GitHub counts against the rate limit (a 304 is free)."""
        return self.requests - self.gate_304 - self.store_304

    def key(self) -> tuple[int, ...]:
        return (self.gate, self.gate_points, self.gate_304, self.store, self.store_points,
                self.commits)  # fmt: skip

    def add(self, other: Cost) -> None:
        for name in ("gate", "gate_points", "gate_304", "store", "store_points", "store_304",
                     "commits"):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.seconds += other.seconds

    def as_json(self) -> dict[str, Any]:
        return {"requests": self.requests, "counted": self.counted, "gate": self.gate,
                "gate_points": self.gate_points, "gate_304": self.gate_304,
                "store": self.store, "store_points": self.store_points,
                "store_304": self.store_304, "commits": self.commits,
                "median_s": statistics.median(self.seconds) if self.seconds else None,
                "total_s": sum(self.seconds)}  # fmt: skip


class World:
    def __init__(self, gh: FakeGitHub, root: Path) -> None:
        self.gh, self.root = gh, root
        self._tokens = itertools.count(1)
        sha = "5f3c0ffee" * 4 + "5f3c"
        self.env = clean_env({"GITHUB_API_URL": gh.url, "ZUKE_STATE": f"github://{REPO}",
                              "ZUKE_ACTOR": "alice", "GITHUB_SHA": sha})  # fmt: skip

    def _fresh(self) -> tuple[str, str]:
        """A new GITHUB_TOKEN-like token (github-actions[bot]) and its label in the log."""
        token = f"ghs_job{next(self._tokens):06d}"
        self.gh.add_token(token)
        self.gh.set_token(token)
        return token, f"token-{self.gh.state.tokens.index(token) + 1}"

    def zuke(self, *args: str, expect: int = 0) -> tuple[str, Cost]:
        """One fresh ``zuke`` process with fresh tokens: its output and what GitHub saw."""
        (store_token, store_label), (gate_token, gate_label) = self._fresh(), self._fresh()
        env = {**self.env, "GH_TOKEN": store_token, "GATE_TOKEN": gate_token}
        self.gh.reset_stats()
        started = time.perf_counter()
        proc = subprocess.run([*zuke_command(), *args], cwd=self.root, env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        elapsed = time.perf_counter() - started
        if proc.returncode != expect:
            raise BenchmarkError(f"zuke {' '.join(args)} exited {proc.returncode}:\n"
                                 f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")  # fmt: skip
        stats = self.gh.stats()
        points = stats["graphql_points_by_token"]
        cost = Cost(seconds=[elapsed], commits=int(stats["commits"]),
                    gate_points=int(points.get(gate_label, 0)),
                    store_points=int(points.get(store_label, 0)))  # fmt: skip
        for r in self.gh.requests:
            mine = r["token"] == gate_label
            cost.gate += mine
            cost.store += not mine
            cost.gate_304 += mine and r["status"] == 304
            cost.store_304 += (not mine) and r["status"] == 304
        return proc.stdout, cost

    def release(self) -> tuple[str, int]:
        """A release suspended at ``qa``: its run id and its issue's number."""
        out, _ = self.zuke("promote")
        run_id = out.split("Run ", 1)[1].split()[0]
        (issue,) = [i for i in self.gh.issues(REPO) if f"run={run_id} " in (i["body"] or "")]
        return run_id, int(issue["number"])


def same(costs: list[Cost], what: str) -> Cost:
    if len({c.key() for c in costs}) != 1:
        raise BenchmarkError(f"{what}'s requests varied: {[c.as_json() for c in costs]}")
    first = costs[0]
    first.seconds = [s for c in costs for s in c.seconds]
    return first


def idle(world: World, gates: int, runs: int) -> Cost:
    for _ in range(gates):
        world.release()
    world.zuke("resume", "--check")  # warm-up: the first sweep after the opening
    return same([world.zuke("resume", "--check")[1] for _ in range(runs)], "an idle sweep")


def triggered(world: World, body: str, runs: int) -> Cost:
    """``zuke resume --check RUN_ID`` right after ``body`` lands on a fresh release's issue."""
    costs = []
    for _ in range(runs + 1):
        run_id, number = world.release()
        world.gh.comment(REPO, number, "maint", body)
        costs.append(world.zuke("resume", "--check", run_id)[1])
    return same(costs[1:], "a triggered sweep")  # the first is a warm-up


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


def bench(gates: int, runs: int, sweeps: int, others: int) -> dict[str, Any]:
    limits = {"writes_per_minute": 100_000, "writes_per_hour": 100_000,
              "rate_limit": 1_000_000, "graphql_rate_limit": 1_000_000}  # fmt: skip
    results: dict[str, Any] = {}
    cases: tuple[tuple[str, Callable[[World], Cost]], ...] = (
        ("idle_1", lambda w: idle(w, 1, runs)),
        (f"idle_{gates}", lambda w: idle(w, gates, runs)),
        ("approve", lambda w: triggered(w, "/approve", runs)),
        ("not_a_command", lambda w: triggered(w, "LGTM, thanks!", runs)),
    )
    for name, make in cases:
        with tempfile.TemporaryDirectory(prefix="zuke-bench-approval-") as tmp, \
                FakeGitHub.start(repos=[REPO], **limits) as gh:  # fmt: skip
            world = setup(gh, Path(tmp))
            if name in ("approve", "not_a_command"):
                for _ in range(others):  # other releases wait too: a one-run sweep skips them
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
        return (f"| {label} | {c.gate} ({c.gate_304} × 304) | {c.gate_points} | {c.store} "
                f"({c.store_304} × 304) | {c.store_points} | {c.commits} | {target} "
                f"| {med:.3f} s |")  # fmt: skip

    lines = [
        f"Fresh processes and fresh tokens on a `github://` store; median of {runs} (the "
        f"3-day rows: of {sweeps} sweeps). A 304 comes only within one process (one token).",
        "",
        "| case | gate requests | gate points | store requests | store points | commits "
        "| target | median |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
        row("idle sweep, 1 gate waiting", results["idle_1"], "≤ 2 requests"),
        row(f"idle sweep, {gates} gates waiting", results[f"idle_{gates}"], "≤ 2 requests"),
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
        "| | gate requests | gate points | store requests (304s) | store points | commits "
        "| runner time |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        f"| {sweeps} waiting sweeps | {waited.gate} | {waited.gate_points} | {waited.store} "
        f"({waited.store_304}) | {waited.store_points} | {waited.commits} | "
        f"{sum(waited.seconds):.1f} s |",
        f"| the approving sweep | {approved.gate} | {approved.gate_points} | {approved.store} "
        f"({approved.store_304}) | {approved.store_points} | {approved.commits} | "
        f"{sum(approved.seconds):.1f} s |",
        "",
        f"Per hour while waiting: {waited.gate / hours:.1f} gate requests "
        f"({waited.gate_points / hours:.1f} points), "
        f"{(waited.store - waited.store_304) / hours:.1f} counted store requests "
        f"({waited.store_points / hours:.1f} points); median "
        f"{statistics.median(waited.seconds):.3f} s a sweep.",
    ]
    lines += ["", machine_line()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed samples per case")
    parser.add_argument("--gates", type=int, default=100, help="releases waiting at once")
    parser.add_argument("--others", type=int, default=9,
                        help="other releases waiting beside a one-run sweep's")  # fmt: skip
    parser.add_argument("--sweeps", type=int, default=288, help="sweeps of the long wait")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    before = machine()["loadavg"]
    results = bench(args.gates, args.runs, args.sweeps, args.others)
    if args.json:
        print(dump_json({"machine": machine(), "loadavg_before": before, "gates": args.gates,
                         "sweeps": args.sweeps,
                         "results": {k: v.as_json() for k, v in results.items()}}))  # fmt: skip
    else:
        print(f"load average before: {before}")
        print(markdown(results, args.gates, args.runs, args.sweeps))


if __name__ == "__main__":
    main()
