"""The hang watchdog (``tests/watchdog.py``, issue 28 §7): a test that pytest-timeout cannot
stop prints every thread's stack and fails the run — serially, and under the README's
``-n 2 --dist loadgroup``, where replacing the crashed worker would hang xdist 3.8."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.watchdog import HARD_TIMEOUT_S, hard_timeout, no_restart_where_it_hangs

ROOT = Path(__file__).resolve().parents[1]

# SIGALRM masked: pytest-timeout's signal method never gets to run its handler, as when
# the main thread is blocked in C code that retries on EINTR.
HANGS = """
    import signal
    import time

    def test_hangs():
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(120)
"""
PASSES = """
    def test_one():
        pass

    def test_two():
        pass
"""


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_hangs.py").write_text(textwrap.dedent(HANGS))
    (tmp_path / "test_passes.py").write_text(textwrap.dedent(PASSES))
    env = {**os.environ, "ZUKE_TEST_HARD_TIMEOUT": "3"}
    plugins = ["-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:anyio"]
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.watchdog", *plugins,
         "-o", "timeout=1", *args, str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=240,
    )  # fmt: skip


def test_a_hang_prints_every_threads_stack_and_ends_the_run(tmp_path: Path) -> None:
    done = run(tmp_path, "-p", "no:xdist")
    assert done.returncode != 0
    assert "Timeout (0:00:03)!" in done.stderr, done.stderr[-2000:]
    assert "most recent call first" in done.stderr
    assert 'test_hangs.py", line 7 in test_hangs' in done.stderr


# slow (a child xdist run: 2 s of CPU, 9 s): in the inner loop the serial run above shows the
# dump and the end, and test_under_loadgroup_a_crashed_worker_is_not_replaced the setting
@pytest.mark.slow
@pytest.mark.timeout(300)  # a child xdist run on a loaded VM: 29 s at load 15
def test_under_two_workers_and_loadgroup_the_crash_fails_the_run_instead_of_hanging(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, "-n", "2", "--dist", "loadgroup")  # would hang: the bound above
    assert done.returncode != 0
    assert "crashed while running" in done.stdout, done.stdout[-2000:]
    assert "test_hangs.py::test_hangs" in done.stdout
    assert 'test_hangs.py", line 7 in test_hangs' in done.stderr, done.stderr[-2000:]


@pytest.mark.parametrize(
    ("dist", "given", "restarts"),
    [("loadgroup", None, 0), ("loadscope", None, 0), ("loadfile", None, 0),
     ("load", None, None), ("no", None, None), ("loadgroup", 3, 3)],
)  # fmt: skip
def test_under_loadgroup_a_crashed_worker_is_not_replaced(
    dist: str, given: int | None, restarts: int | None
) -> None:
    option = SimpleNamespace(dist=dist, maxworkerrestart=given)
    no_restart_where_it_hangs(option)
    assert option.maxworkerrestart == restarts


class _Config:
    def __init__(self, option: float | None, ini: str) -> None:
        self.option = SimpleNamespace(timeout=option)
        self._ini = ini

    def getini(self, name: str) -> str:
        assert name == "timeout"
        return self._ini


class _Item:
    def __init__(self, marker: float | None, option: float | None = None, ini: str = "120"):
        self.config = _Config(option, ini)
        self._marker = None if marker is None else pytest.mark.timeout(marker).mark

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return self._marker if name == "timeout" else None


@pytest.mark.parametrize(
    ("item", "hard"),
    [
        (_Item(None), HARD_TIMEOUT_S),  # the suite's 120 s: the watchdog's own 300 s
        (_Item(600), 1200.0),  # a longer mark: twice it, pytest-timeout tries first
        (_Item(0), None),  # told no limit (tests/sim's soak): no watchdog either
        (_Item(None, option=0), None),  # --timeout 0 (a debugging session)
        (_Item(None, option=400), 800.0),
        (_Item(None, ini="0"), None),
    ],
)
def test_the_watchdog_always_comes_after_pytest_timeout(item: _Item, hard: float | None) -> None:
    assert hard_timeout(item) == hard  # type: ignore[arg-type]
