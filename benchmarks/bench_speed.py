"""Step 13 speed: the comparison table of issue 19, section 1, measured side by side.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_speed.py --doit /path/to/venv/bin/doit   # markdown
    .venv/bin/python benchmarks/bench_speed.py --json                            # no doit row

Workloads (the issue's), each a fresh process, output to ``/dev/null``:

- a 1000-target chain (``bench_engine.chain_build``: each target depends on the
  one before, trivial sync bodies), no state store;
- the same chain with ``--state`` on the default filesystem store, every
  transition recorded (``.zuke/runs`` in a fresh directory per run);
- a fan-out of 300 items x 3 stages at concurrency 8 (``bench_fan_out.BUILD``),
  no store (``ZUKE_STATE=off``);
- with ``--doit``: doit (0.37) running a 1000-task chain (each task's
  ``task_dep`` the one before, a no-op Python action), in its default form:
  ``doit t0999`` (no ``-n``: doit's default runner, in-process, one thread;
  ``-n 1`` would select its multiprocess runner, which forks a worker and
  pickles every task to it and takes over twice as long, so it is not the
  form a doit user runs), ``.doit.db*`` removed before each run, bytecode
  written as usual; doit writes its dependency file once, at the end;
- when ``ZUKE_ORIG`` (or ``--orig``) names a checkout of the original
  TypeScript Zuke (zuke-build/zuke) and Deno is found (``--deno``, ``ZUKE_DENO``
  or ``deno`` on ``PATH``): the original running the same 1000-target chain
  (``orig_chain``: a ``Build`` class whose targets each ``dependsOn`` the one
  before, empty bodies), ``deno run -A --cached-only`` with
  ``DENO_NO_UPDATE_CHECK=1`` (the update check alone waits seconds offline);
  the untimed warm-up round fills Deno's module cache, so no run type-checks.
  Without a checkout the original's figure is issue 19's, labelled as such.

Paired runs: one round runs every workload once, then the next round (after
one untimed warm-up round), so drifting load on a shared machine hits every
workload alike; the median of ``--runs`` (default 7) is the figure, beside the
min and the children's CPU time (user + system, from ``wait4``), which load
inflates less than wall time. The load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import clean_env, dump_json, machine, zuke_command
from bench_engine import chain_build
from bench_fan_out import BUILD as FAN_OUT_BUILD

#: The original TypeScript Zuke on Deno 2.9, from issue 19: used only when the original is
#: not run in the same paired rounds (no ``ZUKE_ORIG`` checkout), and labelled so.
ORIGINAL_S = {"chain": 0.133, "chain-fs": 7.6, "fan-out": 0.161}


def orig_chain(n: int, core: Path) -> str:
    """The original's build file for the same chain: ``t0000 <- ... <- t{n-1}``, empty bodies."""
    lines = [f'import {{ Build, run, target }} from "{core / "mod.ts"}";', "",
             "class Chain extends Build {"]  # fmt: skip
    for i in range(n):
        dep = f".dependsOn(this.t{i - 1:04d})" if i else ""
        lines.append(f"  t{i:04d} = target(){dep}.executes(() => {{}});")
    lines += ["}", "", "await run(Chain);", ""]
    return "\n".join(lines)


def doit_chain(n: int) -> str:
    """A dodo.py of ``n`` tasks, each depending on the one before, each a no-op action."""
    lines = ["def _noop():", "    return None", "", ""]
    for i in range(n):
        dep = f"        'task_dep': ['t{i - 1:04d}'],\n" if i else ""
        lines.append(
            f"def task_t{i:04d}():\n    return {{\n        'actions': [_noop],\n{dep}"
            "        'verbosity': 0,\n    }\n\n"
        )
    return "\n".join(lines)


@dataclass
class Workload:
    key: str
    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]
    #: a directory emptied before every run (the store of the chain with state)
    fresh: Path | None = None
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def run_once(self) -> tuple[float, float]:
        if self.fresh is not None:
            shutil.rmtree(self.fresh, ignore_errors=True)
        started = time.perf_counter()
        proc = subprocess.Popen(
            self.argv, cwd=self.cwd, env=self.env, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.argv} exited {proc.returncode}: {err.decode()[-2000:]}")
        return elapsed, usage.ru_utime + usage.ru_stime

    def as_json(self) -> dict[str, object]:
        return {
            "workload": self.name,
            "wall_s": self.wall,
            "cpu_s": self.cpu,
            "median_s": statistics.median(self.wall),
            "min_s": min(self.wall),
            "cpu_median_s": statistics.median(self.cpu),
        }


def workloads(
    root: Path, doit: str | None, n: int, orig: Path | None = None, deno: str | None = None
) -> list[Workload]:
    env = clean_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    zuke = zuke_command()
    out: list[Workload] = []
    for key, source in (("chain", chain_build(n)), ("fan-out", FAN_OUT_BUILD)):
        (root / key).mkdir()
        (root / key / "build.py").write_text(source)
    out.append(Workload("chain", f"{n}-target chain, no state", [*zuke, f"t{n - 1:04d}"],
                        root / "chain", env))  # fmt: skip
    out.append(
        Workload("chain-fs", f"{n}-target chain, filesystem store",
                 [*zuke, "--state", f"t{n - 1:04d}"], root / "chain", env,
                 fresh=root / "chain" / ".zuke")
    )  # fmt: skip
    out.append(Workload("fan-out", "fan-out 300 x 3, concurrency 8, no store",
                        [*zuke, "batch", "--n", "300"], root / "fan-out",
                        {**env, "ZUKE_STATE": "off"}))  # fmt: skip
    if doit is not None:
        (root / "doit").mkdir()
        (root / "doit" / "dodo.py").write_text(doit_chain(n))
        out.append(
            Workload("doit", f"doit 0.37, {n}-task chain", [doit, f"t{n - 1:04d}"],
                     root / "doit", env, fresh=None)
        )  # fmt: skip
    if orig is not None and deno is not None:
        (root / "orig").mkdir()
        (root / "orig" / "chain.ts").write_text(orig_chain(n, orig / "packages" / "core"))
        out.append(
            Workload("orig", f"the original (Deno), {n}-target chain",
                     [deno, "run", "-A", "--cached-only", "chain.ts", f"t{n - 1:04d}"],
                     root / "orig", {**env, "DENO_NO_UPDATE_CHECK": "1"})
        )  # fmt: skip
    return out


def measure(loads: Sequence[Workload], runs: int) -> None:
    for round_no in range(1 + runs):
        for w in loads:
            if w.key == "doit":  # doit skips tasks it ran before: start from nothing
                for name in os.listdir(w.cwd):
                    if name.startswith(".doit.db"):
                        os.unlink(w.cwd / name)
            wall, cpu = w.run_once()
            if round_no:
                w.wall.append(wall)
                w.cpu.append(cpu)


def _paired(zuke: Workload, peer: Workload) -> float:
    """The median of the per-round ratios zuke / peer: both ran in the same round."""
    return statistics.median(z / p for z, p in zip(zuke.wall, peer.wall, strict=True))


def _versus(zuke: Workload, peer: Workload) -> str:
    """zuke / peer: wall medians, the per-round median (brackets), and CPU medians — the
    figure load inflates least (Deno's CPU includes its compiler threads)."""
    wall = statistics.median(zuke.wall) / statistics.median(peer.wall)
    cpu = statistics.median(zuke.cpu) / statistics.median(peer.cpu)
    return f"{wall:.2f}× ({_paired(zuke, peer):.2f}×), CPU {cpu:.2f}×"


def render(loads: Sequence[Workload], before: str, after: str, runs: int) -> str:
    by = {w.key: w for w in loads}
    doit = by.get("doit")
    orig_run = by.get("orig")
    m = machine()
    lines = [
        "# Step 18 speed",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}; load average "
        f"{before} before, {after} after. Paired rounds, median of {runs} fresh processes "
        "after a warm-up round; CPU = the child's user + system time; a ratio is the "
        "ratio of the medians, then (in brackets) the median of the per-round ratios, "
        "then the ratio of the CPU medians.",
        "",
        "The original: "
        + ("measured in these rounds." if orig_run else "issue 19's figure (NOT re-measured)."),
        "",
        "| workload | original | zuke (median) | zuke (min) | zuke CPU | doit | "
        "zuke / original | zuke / doit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in loads:
        if w.key in ("doit", "orig"):
            continue
        med = statistics.median(w.wall)
        orig_cell, versus_orig = "—", "—"
        if w.key == "chain" and orig_run is not None:
            o = statistics.median(orig_run.wall)
            orig_cell = f"{o:.3f} s (CPU {statistics.median(orig_run.cpu):.3f})"
            versus_orig = _versus(w, orig_run)
        elif w.key in ORIGINAL_S and orig_run is None:
            o = ORIGINAL_S[w.key]
            orig_cell = f"{o:.3f} s (issue 19)"
            versus_orig = f"{med / o:.2f}×"
        versus_doit, doit_cell = "—", "—"
        if w.key == "chain-fs" and doit is not None:
            d = statistics.median(doit.wall)
            doit_cell = f"{d:.3f} s (CPU {statistics.median(doit.cpu):.3f})"
            versus_doit = _versus(w, doit)
        lines.append(
            f"| {w.name} | {orig_cell} | {med:.3f} s | {min(w.wall):.3f} s | "
            f"{statistics.median(w.cpu):.3f} s | {doit_cell} | {versus_orig} | {versus_doit} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--targets", type=int, default=1000, help="chain length (default 1000)")
    parser.add_argument("--doit", help="doit's executable (0.37), for the doit row")
    parser.add_argument(
        "--orig",
        default=os.environ.get("ZUKE_ORIG"),
        help="a checkout of the original Zuke (default: $ZUKE_ORIG)",
    )
    parser.add_argument(
        "--deno",
        default=os.environ.get("ZUKE_DENO") or shutil.which("deno"),
        help="Deno's executable (default: $ZUKE_DENO, else deno on PATH)",
    )
    parser.add_argument("--only", help="comma-separated workload keys: chain,chain-fs,fan-out")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    orig = Path(args.orig) if args.orig else None
    if orig is not None and not (orig / "packages" / "core" / "mod.ts").is_file():
        parser.error(f"{orig} is not a checkout of the original Zuke (no packages/core/mod.ts)")
    if orig is not None and args.deno is None:
        parser.error("ZUKE_ORIG is set but Deno was not found: pass --deno or set ZUKE_DENO")
    before = f"{os.getloadavg()[0]:.2f}"
    with tempfile.TemporaryDirectory(prefix="zuke-bench-speed-") as tmp:
        loads = workloads(Path(tmp), args.doit, args.targets, orig, args.deno)
        if args.only:
            keep = {*args.only.split(","), "doit", "orig"}
            loads = [w for w in loads if w.key in keep]
        measure(loads, args.runs)
    after = f"{os.getloadavg()[0]:.2f}"
    if args.json:
        print(dump_json({"machine": machine(), "load_before": before, "load_after": after,
                         "original_s": None if orig else ORIGINAL_S,
                         "workloads": [w.as_json() for w in loads]}))  # fmt: skip
    else:
        print(render(loads, before, after, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
