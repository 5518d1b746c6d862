"""The Action's install step under nektos/act: cold (an empty cache) and warm (the cache hit).

What is timed: the action's own install steps, as act reports each step's time (``Success -
Main <step> [1.234s]``): keying the cache, restoring it, installing zuke (the hashed locks
and zuke's wheel) and saving the cache. Setting up Python is not: that is
``actions/setup-python``'s, and the stand-in's venv here is no measure of it.

Each round runs, alternating in one run (paired: the machine's load falls on all alike):

- **cold**: an empty cache; every wheel comes from the registry (PyPI, or what pip is
  configured with: ``--index-url``), zuke is built by the locked hatchling, the cache saved;
- **warm**: the cache the cold run saved is restored; nothing is fetched or built;
- **before** (with ``--before``): the action as it was before issue 28 §4, from ``main``'s
  history (``pip install <checkout>``: an isolated build that fetches hatchling, every
  dependency unpinned from the index, no cache).

The job runs on act's host mode with the setup-python stand-in in its bare mode (a venv
with its own pip and nothing else, like a fresh runner's Python) and zuke's checkout staged
as the action's ``..`` would be on GitHub (``ZUKE_INSTALL_SPEC``). It needs the registry;
the act tests do not.

    python benchmarks/bench_action_install.py --rounds 5 [--before REV] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.action.act_support import (  # noqa: E402
    ACTION_DIR,
    make_repo,
    run_act,
    zuke_action_pin,
)

_REPO, _SHA = zuke_action_pin().split("@")
WORKFLOW = f"""name: install
on: workflow_dispatch
permissions: {{}}
jobs:
  install:
    runs-on: ubuntu-latest
    steps:
      - uses: {_REPO}/action@{_SHA} # v0.1.0
        with:
          install-only: "true"
      - name: Run zuke
        run: python -m zuke --help >/dev/null && python -c 'import zuke_gh, httpx, cryptography'
"""
INSTALL_STEPS = ("Key the install cache", "Restore the wheels", "Install zuke", "Save the wheels")
_STEP = re.compile(r"(?:✅|❌)\s+(?:Success|Failure) - Main (.+?) \[([0-9.]+)(ms|s|m)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0}
_CPU = re.compile(r"zuke action: installed in ([0-9.]+)s \(([0-9.]+)s of CPU\)")


def step_seconds(log: str) -> dict[str, float]:
    """Each step's time as act reports it, by step name (the last report of a name wins)."""
    return {m[1]: float(m[2]) * _UNIT[m[3]] for m in _STEP.finditer(log)}


def stage_checkout(into: Path) -> Path:
    """What the action's ``..`` holds on GitHub, as far as installing zuke reads it."""
    for part in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / part, into / part)
    for part in ("zuke", "zuke_gh"):
        shutil.copytree(ROOT / part, into / part, ignore=shutil.ignore_patterns("__pycache__"))
    return into


def stage_action(staging: Path, revision: str | None) -> None:
    """The action act runs: this checkout's, or ``revision``'s action.yml over it."""
    action = staging / "zuke-repository" / "action"
    shutil.copytree(ACTION_DIR, action, ignore=shutil.ignore_patterns("__pycache__"))
    if revision is not None:
        old = subprocess.run(
            ["git", "show", f"{revision}:action/action.yml"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (action / "action.yml").write_text(old)


def one_job(
    work: Path, checkout: Path, cache: Path, revision: str | None
) -> tuple[float, float | None]:
    """(the install steps' wall seconds, install.py's CPU seconds or None) of one job."""
    staging = Path(tempfile.mkdtemp(prefix="act-", dir=work))
    stage_action(staging, revision)
    repo = make_repo(Path(tempfile.mkdtemp(prefix="repo-", dir=work)) / "r", build_py="")
    env = {
        "STANDIN_PYTHON": sys.executable,
        "STANDIN_BARE": "1",
        "STANDIN_CACHE_DIR": str(cache),
        "ZUKE_INSTALL_SPEC": str(checkout),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    (repo / ".github" / "workflows" / "install.yml").write_text(WORKFLOW)
    result = run_act(repo, "workflow_dispatch", "install.yml", env=env, cache=staging, timeout=600)
    if not result.job_succeeded():
        raise SystemExit(f"the install job failed:\n{result.log[-4000:]}")
    steps = step_seconds(result.log)
    print("  " + ", ".join(f"{k}: {v:.1f}s" for k, v in steps.items()), flush=True)
    shutil.rmtree(staging, ignore_errors=True)
    if revision is not None:
        return steps["Install zuke"], None
    cpu = _CPU.search(result.log)
    return sum(steps.get(name, 0.0) for name in INSTALL_STEPS), float(cpu[2]) if cpu else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--before", metavar="REV", help="also time the action at REV")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"cold": [], "warm": [], "cold cpu": [], "warm cpu": []}
    if args.before:
        samples["before"] = []

    def record(name: str, timed: tuple[float, float | None]) -> None:
        samples[name].append(timed[0])
        if timed[1] is not None:
            samples[f"{name} cpu"].append(timed[1])

    with tempfile.TemporaryDirectory(prefix="bench-action-") as tmp:
        work = Path(tmp)
        checkout = stage_checkout(Path(tempfile.mkdtemp(prefix="zuke-", dir=work)))
        for n in range(args.rounds):
            cache = work / f"cache-{n}"
            cache.mkdir()
            record("cold", one_job(work, checkout, cache, None))
            record("warm", one_job(work, checkout, cache, None))
            if args.before:
                record("before", one_job(work, checkout, work / "none", args.before))
            shown = ", ".join(f"{k} {v[-1]:.1f}s" for k, v in samples.items() if v)
            print(f"round {n + 1}: {shown}", flush=True)
    load = os.getloadavg()
    report = {
        name: {"median": statistics.median(v), "min": min(v), "max": max(v), "samples": v}
        for name, v in samples.items()
        if v
    }
    for name, row in report.items():
        print(
            f"{name:>6}: median {row['median']:.1f}s (min {row['min']:.1f}, max {row['max']:.1f})"
        )
    print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    if args.json:
        args.json.write_text(json.dumps({"load": load, **report}, indent=2))


if __name__ == "__main__":
    main()
