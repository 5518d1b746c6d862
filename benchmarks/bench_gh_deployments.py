"""GitHub Deployments benchmark: requests per sweep with 100 waiting releases that have
deployments (issue 26 §6).

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_gh_deployments.py            # markdown
    .venv/bin/python benchmarks/bench_gh_deployments.py --json     # machine-readable

The fake GitHub (``fixtures/fake_github``) serves from this process. A filesystem store holds
100 runs of one build, each deployed to ``staging`` and suspended at a signal gate before
``production`` — so each has two deployments on the fake (staging ``success``, production
``pending``), made by running the build 100 times in this process with
``zuke_gh.github_deployments`` as its reporter; a second store holds 100 such runs whose
reports never reached GitHub (made without the reporter: as if every write had failed or been
deferred), so its first sweep creates every deployment — the catch-up's cost. Each store is
copied afresh before every sweep.

Paired: each sample sweeps the same store twice, alternating, with the reporter (the build
as written) and without it (``ZUKE_BENCH_NO_REPORTER=1``: ``reporters()`` returns none) — the
peer is the same sweep without Deployments. Reported: GitHub requests and store writes for one
sweep (the target: **0 requests** when no run changed — a reporter sends only differences),
and the wall time of a fresh ``zuke resume --check`` process, median of ``--runs`` after one
untimed warm-up of each.
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

RUNS = 100
REPO = "acme/app"
BUILD = """
    import os
    from zuke import Build, external_signal, target
    from zuke_gh import github_deployments

    class Release(Build):
        def reporters(self):
            if os.environ.get("ZUKE_BENCH_NO_REPORTER"):
                return []
            return [github_deployments(lambda d: d.repo("acme/app"))]

        @target
        def staging(self, t):
            return t.environment("staging", url="https://staging.example.com").executes(
                lambda: None)

        @target
        def approve(self, t):
            return t.depends_on(self.staging).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("72h"))

        @target
        def production(self, t):
            return t.depends_on(self.approve).environment("production").executes(lambda: None)
"""


@dataclass(frozen=True)
class Result:
    case: str
    requests: int
    journal_lines: int
    samples: tuple[float, ...]

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)


def make_template(root: Path, gh: FakeGitHub, *, shown: bool) -> Path:
    """``RUNS`` runs suspended at ``approve``: each with its two deployments on the fake
    (``shown``), or none yet (their reports all failed or were deferred: a sweep catches up)."""
    store = root / f"template-{shown}"
    sha = gh.head(REPO, "main")
    env = clean_env({"ZUKE_STATE_DIR": str(store), "GITHUB_API_URL": gh.url,
                     "GH_TOKEN": gh.token, "GITHUB_SHA": sha or ""})  # fmt: skip
    os.environ.update({"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token})  # the reporter's client
    if not shown:
        os.environ["ZUKE_BENCH_NO_REPORTER"] = "1"
    build_cls = load_build_class(root / "build.py")
    before = len(gh.deployments(REPO))
    for _ in range(RUNS):
        result = execute(build_cls, ["production"], env=env)
        if result.status != "suspended":
            raise BenchmarkError(f"a template run ended {result.status}, not suspended")
    os.environ.pop("ZUKE_BENCH_NO_REPORTER", None)
    made = len(gh.deployments(REPO)) - before
    if made != (2 * RUNS if shown else 0):
        raise BenchmarkError(f"{made} deployments made for the template")
    return store


def lines(store: Path) -> int:
    return sum(len(p.read_bytes().splitlines()) for p in store.glob("*.jsonl"))


Sample = tuple[float, int, int]


def sweep_once(root: Path, gh: FakeGitHub, template: Path, reporter: bool) -> Sample:
    """Copy the store, sweep it once; (seconds, GitHub requests, journal lines written)."""
    before = lines(template)  # the copy starts as the template
    gh.reset_stats()
    extra = {} if reporter else {"ZUKE_BENCH_NO_REPORTER": "1"}
    sha = gh.head(REPO, "main") or ""
    env = {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token, "GITHUB_SHA": sha, **extra}
    seconds = time_sweep(template, root, env)
    return seconds, int(gh.stats()["requests"]), lines(root / "store") - before


def bench(samples: int) -> list[Result]:
    limits = {"writes_per_minute": 100_000, "writes_per_hour": 100_000}
    with (
        tempfile.TemporaryDirectory(prefix="zuke-bench-deploy-") as tmp,
        FakeGitHub.start(repos=[REPO], **limits) as gh,
    ):
        root = Path(tmp)
        (root / "build.py").write_text(textwrap.dedent(BUILD))
        templates = {
            "nothing changed": make_template(root, gh, shown=True),
            "catching up (no deployment shown yet)": make_template(root, gh, shown=False),
        }
        sides = {True: "with github_deployments", False: "without a reporter (peer)"}
        results = []
        for case, template in templates.items():
            got: dict[bool, list[Sample]] = {True: [], False: []}
            for reporter in sides:
                sweep_once(root, gh, template, reporter)  # warm-up
            for _ in range(samples):  # paired: alternating in one run
                for reporter in sides:
                    got[reporter].append(sweep_once(root, gh, template, reporter))
            for reporter, side in sides.items():
                name = f"{case}: {side}"
                requests = {r for _, r, _ in got[reporter]}
                written = {w for _, _, w in got[reporter]}
                if len(requests) != 1 or len(written) != 1:
                    raise BenchmarkError(f"{name}: the counts varied: {requests} {written}")
                results.append(Result(name, requests.pop(), written.pop(),
                                      tuple(s for s, _, _ in got[reporter])))  # fmt: skip
    return results


def markdown(results: list[Result]) -> str:
    out = [
        f"{RUNS} suspended releases deploying to staging and production: either each shows "
        f"its two deployments (staging `success`, production `pending`) and nothing changed, "
        f"or none is shown yet (every report failed or was deferred); one fresh `zuke resume "
        f"--check` each, paired with the same sweep without the reporter; median of "
        f"{len(results[0].samples)}.",
        "",
        "| case | GitHub requests | journal lines written | median (s) | min | max |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        out.append(f"| {r.case} | {r.requests} | {r.journal_lines} | {r.median_s:.3f} | "
                   f"{min(r.samples):.3f} | {max(r.samples):.3f} |")  # fmt: skip
    out += ["", machine_line()]
    return "\n".join(out)


def as_json(results: list[Result]) -> object:
    return {"machine": machine(), "runs": RUNS, "results": [
        {"case": r.case, "requests": r.requests, "journal_lines": r.journal_lines,
         "samples": list(r.samples), "median_s": r.median_s} for r in results]}  # fmt: skip


def main() -> None:
    table_main(__doc__ or "", bench, markdown, as_json, runs_help="timed sweeps per case")


if __name__ == "__main__":
    main()
