"""Timing fresh processes: the helper every benchmark script under ``benchmarks/`` shares.

A measurement is the wall-clock time of a whole child process, interpreter
start-up included, because that is what a user waits for when they type
``zuke ...``. Each measurement runs the command once untimed (so Python's
bytecode cache for the generated build file exists, as it would on a second
invocation) and then ``runs`` times timed; the median is the headline number.

Stdlib only, so a benchmark runs in any environment that can run zuke.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal, TypeVar

Output = Literal["devnull", "pipe"]
R = TypeVar("R")

#: Environment variables that would make a run use a state store; benchmarks of the
#: engine alone remove them so every run is in-memory.
STATE_VARIABLES = (
    "ZUKE_STATE",
    "ZUKE_STATE_DIR",
    "ZUKE_STATE_URL",
    "ZUKE_STATE_TOKEN",
    "ZUKE_FILE",
)


@dataclass(frozen=True)
class Timing:
    """One benchmark: a command, how its output was handled, and its wall times in seconds."""

    name: str
    command: str
    output: Output
    samples: tuple[float, ...]
    notes: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def worst(self) -> float:
        return max(self.samples)

    def as_json(self) -> dict[str, object]:
        data = asdict(self)
        data["samples"] = list(self.samples)
        data.update(median=self.median, min=self.best, max=self.worst)
        return data


class BenchmarkError(RuntimeError):
    """A benchmarked command exited with an unexpected code."""


def python_executable() -> str:
    """The interpreter running the benchmark (the project's virtualenv, normally)."""
    return sys.executable


def zuke_command() -> list[str]:
    """How to start ``zuke``: the script beside this interpreter, else ``python -m zuke``."""
    here = Path(sys.executable).parent
    for name in ("zuke", "zuke.exe"):
        candidate = here / name
        if candidate.is_file():
            return [str(candidate)]
    found = shutil.which("zuke")
    if found:
        return [found]
    return [sys.executable, "-m", "zuke"]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without state-store settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in STATE_VARIABLES}
    env.update(extra or {})
    return env


def time_once(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    output: Output = "devnull",
    expect_code: int = 0,
) -> float:
    """Wall seconds for one fresh process running ``argv``; raise if it exits unexpectedly."""
    stdout = subprocess.DEVNULL if output == "devnull" else subprocess.PIPE
    started = time.perf_counter()
    proc = subprocess.run(
        list(argv), cwd=cwd, env=dict(env), stdout=stdout, stderr=subprocess.PIPE, check=False
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != expect_code:
        tail = proc.stderr.decode(errors="replace")[-2000:]
        raise BenchmarkError(
            f"{' '.join(argv)} exited {proc.returncode} (expected {expect_code}) in {cwd}:\n{tail}"
        )
    return elapsed


def measure(
    name: str,
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None = None,
    runs: int = 5,
    warmup: int = 1,
    output: Output = "devnull",
    expect_code: int = 0,
    notes: str = "",
) -> Timing:
    """Run ``argv`` ``warmup`` times untimed, then ``runs`` times timed."""
    env = clean_env() if env is None else env
    for _ in range(warmup):
        time_once(argv, cwd=cwd, env=env, output=output, expect_code=expect_code)
    samples = tuple(
        time_once(argv, cwd=cwd, env=env, output=output, expect_code=expect_code)
        for _ in range(runs)
    )
    return Timing(name=name, command=display(argv), output=output, samples=samples, notes=notes)


def display(argv: Sequence[str]) -> str:
    """A short form of a command for tables: the executable's base name, then the arguments."""
    if not argv:
        return ""
    head = Path(argv[0]).name
    rest = list(argv[1:])
    if head.startswith("python") and rest[:2] == ["-m", "zuke"]:
        head, rest = "zuke", rest[2:]
    return shlex.join([head, *rest])


def markdown_table(timings: Sequence[Timing]) -> str:
    """Timings as a markdown table, seconds to three places."""
    rows = [
        "| benchmark | command | output | median (s) | min (s) | max (s) | runs |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for t in timings:
        rows.append(
            f"| {t.name} | `{t.command}` | {t.output} | {t.median:.3f} | {t.best:.3f} "
            f"| {t.worst:.3f} | {len(t.samples)} |"
        )
    return "\n".join(rows)


def machine() -> dict[str, str]:
    """What the numbers were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        nproc = len(os.sched_getaffinity(0))  # what `nproc` prints: the CPUs we may use
    except AttributeError:
        nproc = os.cpu_count() or 0
    return {
        "nproc": str(nproc or "unknown"),
        "cpu": cpu,
        "python": sys.version.split()[0],
        "implementation": sys.implementation.name,
        "platform": sys.platform,
        "loadavg": _loadavg(),
    }


def machine_line() -> str:
    """The machine in one line, for the end of a benchmark's table."""
    info = machine()
    return (f"{info['cpu']}, {info['nproc']} CPUs, Python {info['python']}, "
            f"load average {info['loadavg']}")  # fmt: skip


def _loadavg() -> str:
    """The 1/5/15-minute load averages: other work on the machine skews wall times."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "unknown"


def dump_json(payload: object) -> str:
    return json.dumps(payload, indent=2, sort_keys=False)


def fresh_copy(template: Path, root: Path) -> Path:
    """``template`` copied to ``root/store`` afresh: every sweep starts from the same runs."""
    target = root / "store"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(template, target)
    return target


def time_sweep(template: Path, root: Path, extra: Mapping[str, str] | None = None) -> float:
    """Wall seconds of one fresh ``zuke resume --check`` over a fresh copy of ``template``."""
    store = fresh_copy(template, root)
    env = clean_env({"ZUKE_STATE_DIR": str(store), **(extra or {})})
    return time_once([*zuke_command(), "resume", "--check"], cwd=root, env=env)


def table_main(
    doc: str,
    bench: Callable[[int], R],
    markdown: Callable[[R], str],
    as_json: Callable[[R], object],
    *,
    runs_help: str,
) -> None:
    """The command line every table benchmark shares: ``--runs N`` and ``--json``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help=runs_help)
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    results = bench(args.runs)
    print(dump_json(as_json(results)) if args.json else markdown(results))
