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
  ``task_dep`` the one before, a no-op Python action); doit writes its
  dependency file once, at the end.

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

#: The original TypeScript Zuke on Deno 2.9, from issue 19 (not re-measured here).
ORIGINAL_S = {"chain": 0.133, "chain-fs": 7.6, "fan-out": 0.161}


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


def workloads(root: Path, doit: str | None, n: int) -> list[Workload]:
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
            Workload("doit", f"doit 0.37, {n}-task chain", [doit, "-n", "1", f"t{n - 1:04d}"],
                     root / "doit", env, fresh=None)
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


def render(loads: Sequence[Workload], before: str, after: str, runs: int) -> str:
    by = {w.key: w for w in loads}
    doit = by.get("doit")
    m = machine()
    lines = [
        "# Step 13 speed",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}; load average "
        f"{before} before, {after} after. Paired rounds, median of {runs} fresh processes "
        "after a warm-up round; CPU = the child's user + system time.",
        "",
        "| workload | original | zuke (median) | zuke (min) | zuke CPU | doit | "
        "zuke / original | zuke / doit |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for w in loads:
        if w.key == "doit":
            continue
        med = statistics.median(w.wall)
        orig = ORIGINAL_S.get(w.key)
        versus_doit = "—"
        doit_cell = "—"
        if w.key == "chain-fs" and doit is not None:
            d = statistics.median(doit.wall)
            doit_cell = f"{d:.3f} s (CPU {statistics.median(doit.cpu):.3f})"
            versus_doit = f"{med / d:.2f}×"
        lines.append(
            f"| {w.name} | {orig:.3f} s | {med:.3f} s | {min(w.wall):.3f} s | "
            f"{statistics.median(w.cpu):.3f} s | {doit_cell} | "
            f"{med / orig:.2f}× | {versus_doit} |"
            if orig is not None
            else f"| {w.name} | — | {med:.3f} s | | | | | |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed rounds (default 7)")
    parser.add_argument("--targets", type=int, default=1000, help="chain length (default 1000)")
    parser.add_argument("--doit", help="doit's executable (0.37), for the doit row")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args(argv)
    before = f"{os.getloadavg()[0]:.2f}"
    with tempfile.TemporaryDirectory(prefix="zuke-bench-speed-") as tmp:
        loads = workloads(Path(tmp), args.doit, args.targets)
        measure(loads, args.runs)
    after = f"{os.getloadavg()[0]:.2f}"
    if args.json:
        print(dump_json({"machine": machine(), "load_before": before, "load_after": after,
                         "original_s": ORIGINAL_S,
                         "workloads": [w.as_json() for w in loads]}))  # fmt: skip
    else:
        print(render(loads, before, after, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
