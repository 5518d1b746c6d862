"""Cancelling real ``zuke`` processes: SIGTERM mid-run, and ``zuke cancel`` from another one."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.e2e.support import finish, output_of, spawn, wait_until, write_build
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunRecord

BUILD = """
    import os, pathlib, subprocess, sys
    from zuke import Build, target

    HERE = pathlib.Path(__file__).parent

    class CD(Build):
        @target
        def deploy(self, t):
            return t.executes(lambda ctx: ctx.state.set({"slot": "sit-7"})).on_cancel(self.rollback)

        @target
        def work(self, t):
            def body(ctx):
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
                (HERE / "child.pid").write_text(str(child.pid))
                child.wait()
            lock = lambda s: s.key("cd-work").with_ttl("30m")
            return t.depends_on(self.deploy).lock(lock).executes(body)

        @target
        def rollback(self, t):
            def body(ctx):
                (HERE / "rolled-back").write_text(ctx.state.get()["slot"])
            return t.executes(body)
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is gone for our purposes
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return False


def only_record(tmp_path: Path) -> tuple[FileSystemStateStore, RunRecord]:
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    return store, found.record


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="child tracking uses /proc")
def test_sigterm_mid_run_compensates_releases_its_locks_and_ends_its_children(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)
    proc = spawn(["work"], tmp_path)
    wait_until(lambda: output_of(tmp_path / "child.pid") != "", "the body's child process")
    child = int((tmp_path / "child.pid").read_text())
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc)
    assert code == 130, out
    assert (tmp_path / "rolled-back").read_text() == "sit-7"  # deploy's meta, in rollback
    wait_until(lambda: not alive(child), "the body's child process to be gone")
    store, record = only_record(tmp_path)
    assert record.status == "cancelled" and record.locks == {}
    assert [e.args.get("target") for e in record.events if e.tool == "compensate"] == ["deploy"]
    assert store.list_locks() == []  # lease, target lock and cancel lock all given back


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="child tracking uses /proc")
def test_zuke_cancel_from_a_second_process_makes_the_first_unwind_itself(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    proc = spawn(["work"], tmp_path, {"ZUKE_CANCEL_POLL": "100ms"})
    wait_until(lambda: output_of(tmp_path / "child.pid") != "", "the body's child process")
    child = int((tmp_path / "child.pid").read_text())
    _, record = only_record(tmp_path)
    code, out = finish(spawn(["cancel", record.id, "--actor", "ops"], tmp_path))
    assert code == 0, out
    assert "cancelled by its owner" in out
    code, owner_out = finish(proc)
    assert code == 130, owner_out
    assert (tmp_path / "rolled-back").read_text() == "sit-7"
    wait_until(lambda: not alive(child), "the body's child process to be gone")
    store, record = only_record(tmp_path)
    assert record.status == "cancelled"
    assert store.list_locks() == []
