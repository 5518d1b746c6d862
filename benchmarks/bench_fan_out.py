"""Fan-out benchmark: a batch of N items x 3 stages, concurrency 8, on the filesystem store.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_fan_out.py            # markdown
    .venv/bin/python benchmarks/bench_fan_out.py --json     # machine-readable

Each measurement is a fresh ``zuke batch --n N`` process (wall clock, output
to ``/dev/null``), median of ``--runs`` after one untimed warm-up, in a
directory of its own whose default filesystem store (``.zuke/runs``) records
every sub-target's row — a fan-out always keeps a record. The bodies are
trivial, so what is measured is zuke: materialising the items, scheduling
their stages, and writing 2 transitions per stage to the record.

Sizes: 300 items (the target: under 0.8 s; the TypeScript original needs
about 2-4 s and grows quadratically with the items) and 2,000 items, to show
the growth is linear — the per-item cost is derived from the two.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import (
    Timing,
    clean_env,
    dump_json,
    machine,
    markdown_table,
    measure,
    zuke_command,
)

GOAL_S = 0.8
SIZES = (1, 300, 2000)

BUILD = """\
from zuke import Build, parameter, target


class Fan(Build):
    n = parameter("items").integer().default(300)

    @target
    def batch(self, t):
        return t.for_each(
            lambda: [f"svc{i:04d}" for i in range(self.n.value)],
            lambda item, index: {
                "checks": target().executes(lambda: None),
                "fork": target().executes(lambda: None),
                "deploy": target().executes(lambda: None),
            },
            lambda s: s.concurrency(8),
        )
"""


def bench(runs: int) -> list[Timing]:
    root = Path(tempfile.mkdtemp(prefix="zuke-bench-fan-"))
    env = clean_env()
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    timings = []
    for n in SIZES:
        where = root / f"n{n}"
        where.mkdir()
        (where / "build.py").write_text(BUILD)
        argv = [*zuke_command(), "batch", "--n", str(n)]
        timings.append(measure(f"fan-out, {n} x 3, concurrency 8", argv, cwd=where, env=env,
                               runs=runs))  # fmt: skip
    return timings


def derive(timings: list[Timing]) -> dict[str, float]:
    one, mid, big = (t.median for t in timings)
    return {
        "per_item_ms_300": (mid - one) / (SIZES[1] - 1) * 1000,
        "per_item_ms_2000": (big - one) / (SIZES[2] - 1) * 1000,
    }


def markdown(timings: list[Timing], runs: int) -> str:
    m = machine()
    d = derive(timings)
    mid = timings[1].median
    lines = [
        "# zuke fan-out benchmark",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, load average "
        f"{m['loadavg']} at the end. Median of {runs} fresh processes after a warm-up.",
        "",
        markdown_table(timings),
        "",
        f"- 300 x 3 at concurrency 8: {mid:.3f} s (goal < {GOAL_S} s: "
        f"{'met' if mid < GOAL_S else 'NOT met'})",
        f"- per item (3 stages, 6 record transitions), over the 1-item run: "
        f"{d['per_item_ms_300']:.2f} ms at 300 items, {d['per_item_ms_2000']:.2f} ms at 2,000 "
        "(equal per-item costs: linear growth)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="timed runs per size")
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    timings = bench(args.runs)
    if args.json:
        print(dump_json({"machine": machine(), "timings": [t.as_json() for t in timings],
                         "derived": derive(timings)}))  # fmt: skip
    else:
        print(markdown(timings, args.runs))


if __name__ == "__main__":
    main()
