"""GitHub workflow gate benchmark: requests per ``zuke resume --check`` with 50 gates waiting.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_gh_sweep.py            # markdown
    .venv/bin/python benchmarks/bench_gh_sweep.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process. A
filesystem store holds 50 runs of one build, each suspended at a
``github_workflow`` gate on the same workflow (``acme/app`` ``e2e.yml`` on
``main``) — made by running the build 50 times in this process, so every
record and every dispatched run is a real one — and is copied afresh from
that template before every sweep. Cases:

- **nothing completed** — all 50 runs queued: every gate stays waiting;
- **1 completed** — one run succeeded: its gate lists the jobs and its run resumes;
- **all completed** — every run succeeded: 50 job listings, 50 runs resumed;
- **first sweep on GHES** — no run id came back from the dispatches, so every
  gate correlates by its marker (nothing completed).

Reported: the fake's request count for one sweep (the target: at most 3 plus
1 per completed run), and the wall time of a fresh ``zuke resume --check``
process, median of ``--runs`` after one untimed warm-up.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the fake GitHub (fixtures/)
from _timing import (
    BenchmarkError,
    clean_env,
    machine,
    machine_line,
    table_main,
    time_sweep,
)

from fixtures.fake_github import FakeGitHub
from zuke import execute
from zuke._loader import load_build_class

GATES = 50
REPO = "acme/app"
BUILD = """
    from zuke import Build, target
    from zuke_gh import github_workflow

    class Release(Build):
        @target
        def e2e(self, t):
            return t.waits_for(lambda s: s.on(github_workflow(
                lambda g: g.repo("acme/app").workflow("e2e.yml").ref("main"))).timeout("2h"))

        @target
        def ship(self, t):
            return t.depends_on(self.e2e).executes(lambda: None)
"""


@dataclass(frozen=True)
class Result:
    case: str
    completed: int
    requests: int
    samples: tuple[float, ...]

    @property
    def target(self) -> int:
        return 3 + self.completed

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)


def make_template(root: Path, gh: FakeGitHub, name: str) -> tuple[Path, list[int]]:
    """``GATES`` runs suspended at ``e2e``; the store and the fake's run ids."""
    store = root / f"template-{name}"
    env = clean_env({"ZUKE_STATE_DIR": str(store), "GITHUB_API_URL": gh.url,
                     "GH_TOKEN": gh.token})  # fmt: skip
    os.environ.update({"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token})  # the gate's client
    build_cls = load_build_class(root / "build.py")
    before = {r["id"] for r in gh.dispatched(REPO)}
    for _ in range(GATES):
        result = execute(build_cls, ["ship"], env=env)
        if result.status != "suspended":
            raise BenchmarkError(f"a template run ended {result.status}, not suspended")
    ids = [r["id"] for r in gh.dispatched(REPO) if r["id"] not in before]
    return store, ids


def sweep_once(root: Path, gh: FakeGitHub, template: Path, ids: list[int], done: int) -> float:
    """Reset the fake's runs (``done`` of them succeeded), copy the store, sweep; seconds."""
    for i, run_id in enumerate(ids):
        if i < done:
            gh.complete_run(run_id, "success")
        else:
            gh.set_run_status(run_id, "queued")
    gh.reset_stats()
    return time_sweep(template, root, {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token})


def bench(samples: int) -> list[Result]:
    results = []
    # 150 dispatches in a few seconds: past GitHub's content-creation limit (80 a minute),
    # which the fake enforces; the benchmark is about polling, so the limit is lifted.
    limits = {"writes_per_minute": 100_000, "writes_per_hour": 100_000}
    with (
        tempfile.TemporaryDirectory(prefix="zuke-bench-gh-") as tmp,
        FakeGitHub.start(repos=[REPO], **limits) as gh,
    ):
        root = Path(tmp)
        (root / "build.py").write_text(textwrap.dedent(BUILD))
        gh.add_workflow(REPO, "e2e.yml", inputs={"zuke_marker": {"required": False}},
                        run_name="${{ inputs.zuke_marker }}", jobs=["unit", "e2e"])  # fmt: skip
        templates = {"github.com": make_template(root, gh, "com")}
        gh.set_ghes(REPO)
        templates["ghes"] = make_template(root, gh, "ghes")
        gh.set_ghes(REPO, None)
        cases = [("nothing completed", "github.com", 0), ("1 completed", "github.com", 1),
                 ("all completed", "github.com", GATES),
                 ("first sweep on GHES (marker correlation)", "ghes", 0)]  # fmt: skip
        for name, kind, done in cases:
            template, ids = templates[kind]
            sweep_once(root, gh, template, ids, done)  # warm-up
            counts, times = [], []
            for _ in range(samples):
                times.append(sweep_once(root, gh, template, ids, done))
                counts.append(int(gh.stats()["requests"]))
            if len(set(counts)) != 1:
                raise BenchmarkError(f"{name}: the request count varied: {counts}")
            results.append(Result(name, done, counts[0], tuple(times)))
    return results


def markdown(results: list[Result]) -> str:
    lines = [
        f"{GATES} suspended runs waiting on one workflow, one fresh `zuke resume --check` each; "
        f"median of {len(results[0].samples)}.",
        "",
        "| case | GitHub requests | target | median (s) | min | max |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        lines.append(f"| {r.case} | {r.requests} | ≤ {r.target} | {r.median_s:.3f} | "
                     f"{min(r.samples):.3f} | {max(r.samples):.3f} |")  # fmt: skip
    lines += ["", machine_line()]
    return "\n".join(lines)


def as_json(results: list[Result]) -> object:
    return {"machine": machine(), "gates": GATES, "results": [
        {"case": r.case, "completed": r.completed, "requests": r.requests,
         "target": r.target, "samples": list(r.samples), "median_s": r.median_s}
        for r in results]}  # fmt: skip


def main() -> None:
    table_main(__doc__ or "", bench, markdown, as_json, runs_help="timed sweeps per case")


if __name__ == "__main__":
    main()
