"""Where the suite's CPU goes: an opt-in plugin (``-p tests.cputime``) for measuring, not testing.

The inner loop's target (issue 28 §7: the README's inner loop in ≤ 45 s on 2 cores) is a
CPU budget first: on two cores, wall time is at least half the CPU. Wall durations
(``--durations``) cannot say which test costs CPU on a loaded machine — a test waiting for
a core looks as slow as one using it. So this plugin sums :func:`os.times` (user + system,
this process's and the children it waited for) around each test's setup, call and
teardown, and the worker's start-up and collection, and writes one JSON line per test to
``$ZUKE_CPUTIME_DIR/<worker>.jsonl``. ``python -m tests.cputime DIR`` sums them up.

Threads are counted (``os.times`` is per process); servers a test starts and never waits
for (the Postgres cluster, ``zuke serve`` replicas killed without a wait) are not.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

import pytest

DIR_ENV = "ZUKE_CPUTIME_DIR"
_out = pytest.StashKey[IO[str]]()
_start = pytest.StashKey[tuple[float, float]]()


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _children() -> float:
    t = os.times()
    return t.children_user + t.children_system


def _worker(config: pytest.Config) -> str:
    workerinput: dict[str, Any] = getattr(config, "workerinput", {})
    return str(workerinput.get("workerid", "main"))


def pytest_configure(config: pytest.Config) -> None:
    where = os.environ.get(DIR_ENV)
    if not where:
        return
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return  # xdist's controller runs no tests
    Path(where).mkdir(parents=True, exist_ok=True)
    config.stash[_out] = open(Path(where) / f"{_worker(config)}.jsonl", "w")  # noqa: SIM115
    config.stash[_start] = (_cpu(), time.monotonic())


def pytest_collection_finish(session: pytest.Session) -> None:
    out = session.config.stash.get(_out, None)
    if out is None:
        return
    cpu0, wall0 = session.config.stash[_start]
    # the interpreter's start-up before this plugin loaded is in the process's CPU too
    cpu = _cpu()
    line = {"collect": True, "cpu": cpu, "wall": time.monotonic() - wall0, "n": len(session.items)}
    line["since_configure_cpu"] = cpu - cpu0
    out.write(json.dumps(line) + "\n")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    out = item.config.stash.get(_out, None)
    if out is None:
        return (yield)
    cpu0, kids0, wall0 = _cpu(), _children(), time.monotonic()
    try:
        return (yield)
    finally:
        line = {"id": item.nodeid, "cpu": _cpu() - cpu0, "wall": time.monotonic() - wall0,
                "children": _children() - kids0}  # fmt: skip
        out.write(json.dumps(line) + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    out = config.stash.get(_out, None)
    if out is not None:
        out.write(json.dumps({"end": True, "cpu": _cpu()}) + "\n")
        out.close()
        del config.stash[_out]


def summarise(where: Path, top: int = 40) -> str:
    """Per worker: start-up + collection CPU, tests' CPU; then the costliest tests and files."""
    tests: list[dict[str, Any]] = []
    lines = []
    for path in sorted(where.glob("*.jsonl")):
        rows = [json.loads(raw) for raw in path.read_text().splitlines() if raw.strip()]
        collect: dict[str, Any] = next((r for r in rows if r.get("collect")), {})
        end: dict[str, Any] = next((r for r in rows if r.get("end")), {})
        mine = [r for r in rows if "id" in r]
        tests += mine
        lines.append(
            f"{path.stem}: collection {collect.get('cpu', 0):.1f} s CPU "
            f"({collect.get('wall', 0):.1f} s wall), {len(mine)} tests "
            f"{sum(r['cpu'] for r in mine):.1f} s CPU / {sum(r['wall'] for r in mine):.1f} s wall,"
            f" process {end.get('cpu', 0):.1f} s CPU"
        )
    kids = sum(r.get("children", 0) for r in tests)
    spawning = sum(1 for r in tests if r.get("children", 0) > 0)
    lines.append(
        f"all: {len(tests)} tests, {sum(r['cpu'] for r in tests):.1f} s CPU, of which"
        f" {kids:.1f} s in waited-for child processes ({spawning} tests reaped some)"
    )
    files: dict[str, float] = {}
    for r in tests:
        key = r["id"].split("::")[0]
        files[key] = files.get(key, 0.0) + r["cpu"]
    lines.append("-- files by CPU")
    for key, cpu in sorted(files.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"{cpu:7.2f}  {key}")
    lines.append("-- tests by CPU")
    for r in sorted(tests, key=lambda r: -r["cpu"])[:top]:
        lines.append(f"{r['cpu']:7.2f} {r['wall']:7.2f}  {r['id']}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarise(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 40))
