"""Resume-sweep benchmark: ``zuke resume --check`` over 500 suspended runs.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_sweep.py            # markdown
    .venv/bin/python benchmarks/bench_sweep.py --json     # machine-readable

The store: a filesystem store (``ZUKE_STATE_DIR``) holding 500 runs of one
build, each suspended at a gate — made by running the build 500 times in
this process (``zuke.execute``), so every record is a real one — and copied
afresh from that template before every timed sweep. Two gates, one store
each: ``external_signal("approved")`` and ``resume_when(<a file exists>)``.

Measured, each as the library call (``resume_check_async`` on a new store
instance, in this process) and as ``zuke resume --check`` in a fresh process
(wall clock, output to ``/dev/null``), median of ``--runs`` after one
untimed warm-up:

- **nothing due**: no signal delivered, the predicate's file absent — every
  run is checked and stays suspended (the target: under 2 ms a run; the
  TypeScript original needs about 7.6 ms);
- **all satisfied**: the predicate's file present — every run is resumed in
  the sweep and driven to its end (its promotion target runs);

and the command on an empty store, its start-up floor. The library rows also
give the bytes the store instance wrote (a sweep with nothing due writes none).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import (
    BenchmarkError,
    clean_env,
    fresh_copy,
    machine,
    machine_line,
    table_main,
    time_once,
    time_sweep,
    zuke_command,
)

from zuke import Build, execute
from zuke._engine.run import RunOptions
from zuke._loader import load_build_class
from zuke.runs.sweep import resume_check_async
from zuke.runs.sweep_report import SweepAction, SweepReport
from zuke.state.filesystem import FileSystemStateStore

RUNS = 500

BUILD = """
    import pathlib
    from zuke import Build, external_signal, parameter, resume_when, target

    class Sweep(Build):
        gate = parameter("signal or predicate").default("signal")
        flag = parameter("the file the predicate waits for").default("")

        @target
        def deploy(self, t):
            return t.executes(lambda: None)

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(self._wait)

        def _wait(self, s):
            if self.gate.value == "signal":
                trigger = external_signal("approved")
            else:
                flag = pathlib.Path(self.flag.value)
                trigger = resume_when(flag.exists)
            s.on(trigger).timeout("72h")

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: None)
"""


@dataclass(frozen=True)
class Case:
    name: str
    gate: str
    due: bool


CASES = (
    Case("nothing due, signal gate", "signal", due=False),
    Case("nothing due, predicate gate", "predicate", due=False),
    Case("all satisfied, predicate gate", "predicate", due=True),
)


@dataclass(frozen=True)
class Result:
    case: str
    how: str
    samples: tuple[float, ...]
    #: bytes the store instance wrote in the last sweep (the library call only)
    written: int | None = None
    #: suspended runs in the store (0: the start-up floor)
    runs: int = RUNS

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)

    @property
    def ms_per_run(self) -> float | None:
        return self.median_s * 1000 / self.runs if self.runs else None

    @property
    def runs_per_s(self) -> float | None:
        return self.runs / self.median_s if self.runs else None


def make_template(root: Path, build_cls: type[Build], gate: str, flag: Path) -> Path:
    """A store of ``RUNS`` runs suspended at ``approve``, made by running the build."""
    store_dir = root / f"template-{gate}"
    env = clean_env({"ZUKE_STATE_DIR": str(store_dir)})
    for _ in range(RUNS):
        result = execute(build_cls, ["promote"], params={"gate": gate, "flag": str(flag)}, env=env)
        if result.status != "suspended":
            raise BenchmarkError(f"a template run ended {result.status}, not suspended")
    return store_dir


def sweep_in_process(build_cls: type[Build], store_dir: Path) -> tuple[float, SweepReport, int]:
    """One sweep on a new store instance: wall seconds, the report, the bytes it wrote."""
    env = clean_env({"ZUKE_STATE_DIR": str(store_dir)})
    store = FileSystemStateStore(store_dir)
    started = time.perf_counter()
    report = asyncio.run(resume_check_async(build_cls, store, run=RunOptions(env=env)))
    return time.perf_counter() - started, report, store.bytes_written


def check(report: SweepReport, case: Case) -> None:
    wanted: SweepAction = "resumed" if case.due else "still-waiting"
    if len(report.entries) != RUNS or report.count(wanted) != RUNS or not report.ok:
        raise BenchmarkError(f"{case.name}: the sweep did not report {RUNS} {wanted}: "
                             f"{report.counts()}")  # fmt: skip


def timed(samples: int, once: Callable[[], float]) -> tuple[float, ...]:
    once()  # warm-up
    return tuple(once() for _ in range(samples))


def bench(samples: int) -> list[Result]:
    results = []
    with tempfile.TemporaryDirectory(prefix="zuke-bench-sweep-") as tmp:
        root = Path(tmp)
        (root / "build.py").write_text(textwrap.dedent(BUILD))
        build_cls = load_build_class(root / "build.py")
        flag = root / "open"
        templates = {
            gate: make_template(root, build_cls, gate, flag) for gate in ("signal", "predicate")
        }
        for case in CASES:
            if case.due:
                flag.write_text("")
            else:
                flag.unlink(missing_ok=True)

            written: list[int] = []

            def library(case: Case = case, written: list[int] = written) -> float:
                store_dir = fresh_copy(templates[case.gate], root)
                elapsed, report, wrote = sweep_in_process(build_cls, store_dir)
                check(report, case)
                written.append(wrote)
                return elapsed

            def command(case: Case = case) -> float:
                return time_sweep(templates[case.gate], root)

            lib = timed(samples, library)
            results.append(Result(case.name, "library call", lib, written=written[-1]))
            results.append(Result(case.name, "`zuke resume --check`", timed(samples, command)))

        def floor() -> float:
            env = clean_env({"ZUKE_STATE_DIR": str(root / "empty")})
            return time_once([*zuke_command(), "resume", "--check"], cwd=root, env=env)

        results.append(Result("no runs (start-up floor)", "`zuke resume --check`",
                              timed(samples, floor), runs=0))  # fmt: skip
    return results


def markdown(results: list[Result]) -> str:
    lines = [
        f"{RUNS} suspended runs, filesystem store; median of {len(results[0].samples)}.",
        "",
        "| case | measured | median (ms) | ms per run | runs per second | bytes written |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        wrote = "" if r.written is None else f"{r.written:,}"
        per_run = "" if r.ms_per_run is None else f"{r.ms_per_run:.2f}"
        rate = "" if r.runs_per_s is None else f"{r.runs_per_s:,.0f}"
        lines.append(f"| {r.case} | {r.how} | {r.median_s * 1000:.0f} | {per_run} | {rate} "
                     f"| {wrote} |")  # fmt: skip
    lines += ["", machine_line()]
    return "\n".join(lines)


def as_json(results: list[Result]) -> object:
    return {"machine": machine(), "runs": RUNS, "results": [
        {"case": r.case, "how": r.how, "samples": list(r.samples), "median_s": r.median_s,
         "ms_per_run": r.ms_per_run, "runs_per_s": r.runs_per_s, "bytes_written": r.written}
        for r in results]}  # fmt: skip


def main() -> None:
    table_main(__doc__ or "", bench, markdown, as_json, runs_help="timed sweeps per measurement")


if __name__ == "__main__":
    main()
