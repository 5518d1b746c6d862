"""benchmarks/bench_speed.py runs its peers in the form their users run them (issue 28 §1).

The doit row once ran ``doit -n 1``, doit's multiprocess runner (twice the time of its
default), and the docs claimed zuke below doit against it; this pins the default form.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_speed


def test_doit_runs_in_its_default_form(tmp_path: Path) -> None:
    loads = {w.key: w for w in bench_speed.workloads(tmp_path, "/opt/doit", 12)}
    doit = loads["doit"]
    # no -n/--process: any value selects doit's MRunner (doit/cmd_run.py), not its default
    assert doit.argv == ["/opt/doit", "t0011"]
    assert (tmp_path / "doit" / "dodo.py").read_text().count("def task_t") == 12


def test_doit_chain_depends_on_the_task_before() -> None:
    source = bench_speed.doit_chain(3)
    assert "'task_dep': ['t0000']" in source and "'task_dep': ['t0001']" in source
    assert source.count("task_dep") == 2
