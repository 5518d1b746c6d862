"""A run on a local store whose loop is its alone (``RunOptions.inline``: the CLI's and
``zuke.execute()``'s) takes its lease, creates and ends its record and gives the lease back
on the loop's thread: asyncio's executor — two worker threads and a third to join them at
the loop's close, each start a wait for the OS under load — is never started (issue 28 §1).
Any other store, or a loop shared with other work, keeps those calls off the loop. And a
run that is not cancelled never imports the compensation walk."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from zuke import Build, StateStore, execute, target
from zuke._engine.run import RunOptions, execute_async
from zuke.state.filesystem import FileSystemStateStore


def chain(store: StateStore) -> type[Build]:
    class Chain(Build):
        def state_store(self) -> StateStore | None:
            return store

        @target
        def a(self, t: Any) -> Any:
            return t.executes(lambda: None)

        @target
        def b(self, t: Any) -> Any:
            return t.depends_on(self.a).executes(lambda: None)

    return Chain


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    real = threading.Thread.start

    def spy(self: threading.Thread) -> None:
        names.append(self.name)
        real(self)

    monkeypatch.setattr(threading.Thread, "start", spy)
    return names


def executor_threads(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith("asyncio") or "_do_shutdown" in n]


def finished_and_released(store: FileSystemStateStore, run_id: str) -> None:
    found = store.get_run(run_id)
    assert found is not None
    assert found.record.status == "succeeded"
    assert found.record.locks == {}  # the lease's key left the record
    assert store.list_locks(run_id=run_id) == []  # and the lease was given back


def test_a_local_store_on_the_runs_own_loop_starts_no_executor_thread(
    tmp_path: Path, started: list[str]
) -> None:
    store = FileSystemStateStore(tmp_path / "runs")
    result = execute(chain(store), ["b"], env={})
    assert result.ok, result
    assert executor_threads(started) == []
    assert any(n.startswith("zuke-heartbeat") for n in started)  # the lease still beats
    finished_and_released(store, result.run_id)


def test_a_store_that_does_not_say_it_is_local_is_called_off_the_loop(
    tmp_path: Path, started: list[str]
) -> None:
    class Wrapped(FileSystemStateStore):
        """A subclass (a test's faulty store, a wrapper that may stall): not local."""

    store = Wrapped(tmp_path / "runs")
    result = execute(chain(store), ["b"], env={})
    assert result.ok, result
    assert executor_threads(started) != []
    finished_and_released(store, result.run_id)


def test_a_loop_shared_with_other_work_keeps_the_calls_off_it(
    tmp_path: Path, started: list[str]
) -> None:
    store = FileSystemStateStore(tmp_path / "runs")
    options = RunOptions(targets=["b"], env={}, inline=False)
    result = asyncio.run(execute_async(chain(store), options))
    assert result.ok, result
    assert executor_threads(started) != []
    finished_and_released(store, result.run_id)


def test_a_run_that_is_not_cancelled_never_imports_the_compensation_walk(
    tmp_path: Path,
) -> None:
    """The walk, the compensations and the gates' on_cancel are imported by a cancelled run
    only (a tenth of a stateful run's imports)."""
    probe = (
        "import sys, json; from zuke import Build, target, execute\n"
        "from zuke.state.filesystem import FileSystemStateStore\n"
        "class C(Build):\n"
        f"    def state_store(self): return FileSystemStateStore({str(tmp_path)!r})\n"
        "    @target\n"
        "    def a(self, t): return t.executes(lambda: None)\n"
        "r = execute(C, ['a'], env={})\n"
        "walk = {'zuke._engine.walk', 'zuke._engine.compensation', 'zuke._engine.gate_cancel'}\n"
        "print(json.dumps([r.ok, sorted(walk & set(sys.modules))]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [True, []]
