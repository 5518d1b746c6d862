"""Engine benchmarks: how long a fresh ``zuke`` process takes on large and small graphs.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_engine.py            # markdown
    .venv/bin/python benchmarks/bench_engine.py --json     # machine-readable

It writes build files into a temporary directory and times whole processes
(median of ``--runs``, default 5, after one untimed warm-up run), output sent
to /dev/null unless a row says ``pipe``. No state store is involved: the
state-store variables are removed from the children's environment. The
children keep a bytecode cache in the temporary directory, as an installed
zuke would have; ``--no-bytecode-cache`` measures compiling from source
instead (when the environment sets ``PYTHONDONTWRITEBYTECODE``).

Measured:

- baselines: ``python -c pass``, ``python -c "import zuke"``, ``zuke --list``
  and a run of the only target of a 1-target build;
- ``zuke --list`` on a 20-target build, and ``zuke runs list --limit 20`` on an
  empty filesystem store (a management command's start-up);
- a 1000-target chain (each target depends on the previous one), trivial sync bodies;
- a 1000-target wide graph (1000 independent targets under one root),
  sequential and with ``--parallel`` (CPU count);
- the chain and the sequential wide graph again with output read through a pipe.

Per-target engine overhead is derived as
``(chain wall - 1-target run wall) / (N - 1)``.

Other benchmark scripts (state stores, locks) live next to this one and share
:mod:`_timing`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

# Importable both as a script (`python benchmarks/bench_engine.py`) and as a module.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import (
    Output,
    Timing,
    clean_env,
    dump_json,
    machine,
    markdown_table,
    measure,
    python_executable,
    zuke_command,
)

#: The goals from the performance issue, in seconds.
CHAIN_GOAL_S = 0.5
LIST_GOAL_S = 0.2


# -- build files ----------------------------------------------------------------


def chain_build(n: int) -> str:
    """``t0000 <- t0001 <- ... <- t{n-1}``: each target depends on the one before."""
    lines = ["from zuke import Build, target", "", "", "class Chain(Build):"]
    for i in range(n):
        deps = f".depends_on(self.t{i - 1:04d})" if i else ""
        lines += [
            "    @target",
            f"    def t{i:04d}(self, t):",
            f"        return t{deps}.executes(lambda: None)",
            "",
        ]
    return "\n".join(lines)


def wide_build(n: int) -> str:
    """``w0000 ... w{n-1}``, independent, and ``all`` depending on every one of them."""
    lines = ["from zuke import Build, target", "", "", "class Wide(Build):"]
    for i in range(n):
        lines += [
            "    @target",
            f"    def w{i:04d}(self, t):",
            "        return t.executes(lambda: None)",
            "",
        ]
    lines += [
        "    @target",
        "    def all(self, t):",
        f"        leaves = [getattr(self, f'w{{i:04d}}') for i in range({n})]",
        "        return t.depends_on(*leaves).executes(lambda: None)",
        "",
    ]
    return "\n".join(lines)


def listed_build(n: int) -> str:
    """``n`` targets with descriptions, a few dependencies and three parameters: a typical build."""
    lines = [
        "from zuke import Build, parameter, target",
        "",
        "",
        "class Listed(Build):",
        '    repo = parameter("service to deploy").required()',
        '    env = parameter("environment").options("sit", "uat", "prod").default("sit")',
        '    tags = parameter("image tags").array()',
        "",
    ]
    for i in range(n):
        deps = f".depends_on(self.step{i - 1:02d})" if i % 4 else ""
        lines += [
            "    @target",
            f"    def step{i:02d}(self, t):",
            f'        return t.description("Step {i} of the release"){deps}.executes(self._body)',
            "",
        ]
    lines += ["    def _body(self):", "        return None", ""]
    return "\n".join(lines)


def write_build(root: Path, name: str, source: str) -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "build.py").write_text(source)
    return directory


# -- benchmarks -------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """Where and how every benchmark of one invocation runs."""

    root: Path
    runs: int
    targets: int
    env: Mapping[str, str]

    def time(self, name: str, argv: Sequence[str], cwd: Path, output: Output = "devnull") -> Timing:
        return measure(name, argv, cwd=cwd, env=self.env, runs=self.runs, output=output)


def bench_baselines(s: Setup) -> list[Timing]:
    python = python_executable()
    zuke = zuke_command()
    one = write_build(s.root, "one", chain_build(1))
    return [
        s.time("python start-up", [python, "-c", "pass"], s.root),
        s.time("import zuke", [python, "-c", "import zuke"], s.root),
        s.time("list, 1 target", [*zuke, "--list"], one),
        s.time("run, 1 target", [*zuke, "t0000"], one),
    ]


def bench_list(s: Setup) -> list[Timing]:
    listed = write_build(s.root, "listed", listed_build(20))
    empty = {**s.env, "ZUKE_STATE_DIR": str(s.root / "empty-store")}
    argv = [*zuke_command(), "runs", "list", "--limit", "20"]
    return [
        s.time("list, 20 targets", [*zuke_command(), "--list"], listed),
        measure("runs list, empty store", argv, cwd=s.root, env=empty, runs=s.runs),
    ]


def bench_chain(s: Setup) -> list[Timing]:
    n = s.targets
    chain = write_build(s.root, "chain", chain_build(n))
    argv = [*zuke_command(), f"t{n - 1:04d}"]
    return [
        s.time(f"chain, {n} targets", argv, chain),
        s.time(f"chain, {n} targets", argv, chain, output="pipe"),
    ]


def bench_wide(s: Setup) -> list[Timing]:
    n = s.targets
    wide = write_build(s.root, "wide", wide_build(n))
    zuke = zuke_command()
    return [
        s.time(f"wide, {n} + root", [*zuke, "all"], wide),
        s.time(f"wide, {n} + root, --parallel", [*zuke, "all", "--parallel"], wide),
        s.time(f"wide, {n} + root", [*zuke, "all"], wide, output="pipe"),
    ]


#: Run in this order; each returns its rows for the table.
BENCHMARKS: Sequence[Callable[[Setup], list[Timing]]] = (
    bench_baselines,
    bench_list,
    bench_chain,
    bench_wide,
)


def child_env(root: Path, *, bytecode_cache: bool) -> dict[str, str]:
    """The children's environment: no state store; Python's bytecode cache under ``root``.

    An installed zuke has compiled bytecode, and a build file gets its own on the
    first run, so by default the children write and reuse a cache (kept in the
    temporary directory, never next to the sources). ``bytecode_cache=False``
    leaves ``PYTHONDONTWRITEBYTECODE`` as the caller's environment has it.
    """
    env = clean_env()
    if bytecode_cache:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    return env


# -- report -----------------------------------------------------------------------


def _find(timings: Sequence[Timing], name: str, output: str = "devnull") -> Timing:
    for t in timings:
        if t.name == name and t.output == output:
            return t
    raise LookupError(name)


def derive(timings: Sequence[Timing], n: int) -> dict[str, float]:
    """Per-target overheads and start-up costs, in milliseconds."""
    one = _find(timings, "run, 1 target").median
    chain = _find(timings, f"chain, {n} targets").median
    wide = _find(timings, f"wide, {n} + root").median
    wide_par = _find(timings, f"wide, {n} + root, --parallel").median
    python = _find(timings, "python start-up").median
    listed = _find(timings, "list, 1 target").median
    return {
        "per_target_chain_ms": (chain - one) / (n - 1) * 1000,
        "per_target_wide_ms": (wide - one) / n * 1000,
        "per_target_wide_parallel_ms": (wide_par - one) / n * 1000,
        "zuke_start_over_python_ms": (listed - python) * 1000,
    }


def goals(timings: Sequence[Timing], n: int) -> list[dict[str, object]]:
    chain = _find(timings, f"chain, {n} targets").median
    listed = _find(timings, "list, 20 targets").median
    return [
        {
            "goal": f"{n}-target chain",
            "limit_s": CHAIN_GOAL_S,
            "median_s": chain,
            "met": chain < CHAIN_GOAL_S,
        },
        {
            "goal": "zuke --list, 20 targets",
            "limit_s": LIST_GOAL_S,
            "median_s": listed,
            "met": listed < LIST_GOAL_S,
        },
    ]


def render(timings: Sequence[Timing], n: int, runs: int, bytecode_cache: bool) -> str:
    m = machine()
    d = derive(timings, n)
    cache = "bytecode cache on" if bytecode_cache else "bytecode cache as the environment has it"
    lines = [
        "# zuke engine benchmarks",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']} ({m['platform']}), "
        f"load average {m['loadavg']} at the end.",
        f"Method: wall clock of a fresh process, median of {runs} after 1 warm-up run; "
        f"no state store; {cache}.",
        "",
        markdown_table(timings),
        "",
        "Derived (ms):",
        "",
        f"- per-target overhead, chain: {d['per_target_chain_ms']:.3f} "
        f"= (chain - 1-target run) / {n - 1}",
        f"- per-target overhead, wide: {d['per_target_wide_ms']:.3f} = (wide - 1-target run) / {n}",
        f"- per-target overhead, wide --parallel: {d['per_target_wide_parallel_ms']:.3f}",
        f"- zuke start-up over bare Python (list, 1 target): {d['zuke_start_over_python_ms']:.1f}",
        "",
        "Goals:",
        "",
    ]
    for g in goals(timings, n):
        verdict = "met" if g["met"] else "NOT met"
        lines.append(f"- {g['goal']} < {g['limit_s']} s: {g['median_s']:.3f} s, {verdict}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per benchmark (default 5)")
    parser.add_argument(
        "--targets", type=int, default=1000, help="size of the chain and the wide graph"
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="do not give the children a bytecode cache (measures compiling from source)",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.targets < 2:
        parser.error("--runs must be at least 1 and --targets at least 2")
    bytecode_cache = not args.no_bytecode_cache
    with tempfile.TemporaryDirectory(prefix="zuke-bench-") as tmp:
        root = Path(tmp)
        setup = Setup(
            root=root,
            runs=args.runs,
            targets=args.targets,
            env=child_env(root, bytecode_cache=bytecode_cache),
        )
        timings: list[Timing] = []
        for bench in BENCHMARKS:
            timings += bench(setup)
    if args.json:
        payload = {
            "machine": machine(),
            "method": {
                "runs": args.runs,
                "warmup": 1,
                "statistic": "median",
                "clock": "wall",
                "bytecode_cache": bytecode_cache,
            },
            "timings": [t.as_json() for t in timings],
            "derived_ms": derive(timings, args.targets),
            "goals": goals(timings, args.targets),
        }
        print(dump_json(payload))
    else:
        print(render(timings, args.targets, args.runs, bytecode_cache))
    return 0


if __name__ == "__main__":
    sys.exit(main())
