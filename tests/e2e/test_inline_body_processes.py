"""Real signals and a real ``zuke cancel`` reaching a body that runs on the loop's thread.

A plain synchronous body that is the run's only work runs on the event loop's
thread (no thread hop). The loop cannot run meanwhile, so what stops a run
reaches the body from other threads: Ctrl-C through the signal relay, a
second Ctrl-C exits at once, ``zuke cancel`` through the cancel watch's thread —
exactly as for a body on a worker thread.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.support import alive, finish, output_of, spawn, wait_until, write_build
from zuke.state.filesystem import FileSystemStateStore

BUILD = """
    import pathlib, subprocess, sys, threading, time
    from zuke import Build, target

    HERE = pathlib.Path(__file__).parent

    class Inline(Build):
        @target
        def polite(self, t):
            def body(ctx):
                (HERE / "started").write_text(threading.current_thread().name)
                told = ctx.cancelled.wait(60)
                (HERE / "told").write_text(str(told))
            return t.executes(body)

        @target
        def after(self, t):
            return t.depends_on(self.polite).executes(lambda: (HERE / "after").write_text("ran"))

        @target
        def child(self, t):
            def body(ctx):
                child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
                (HERE / "child.pid").write_text(str(child.pid))
                child.wait()
            return t.executes(body)

        @target
        def stubborn(self, t):
            def body():
                (HERE / "started").write_text(threading.current_thread().name)
                while True:  # never looks at ctx.cancelled
                    time.sleep(0.05)
            return t.executes(body)
"""


def started(tmp_path: Path) -> str:
    """The thread the body started on. The body's ``write_text`` creates the file before
    it writes the name, so an empty file is not yet an answer: waiting only for the file
    to exist read "" once under CI's two workers (issue 28 §7)."""
    wait_until(lambda: output_of(tmp_path / "started") != "", "the body to start")
    return (tmp_path / "started").read_text()


def test_ctrl_c_tells_a_body_on_the_loops_thread_and_cancels_the_run(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    proc = spawn(["after"], tmp_path, {"ZUKE_STATE": "off"})
    assert started(tmp_path) == "MainThread"  # the run's only work: on the loop's thread
    proc.send_signal(signal.SIGINT)
    code, out = finish(proc)
    assert code == 130, out
    assert (tmp_path / "told").read_text() == "True"
    assert not (tmp_path / "after").exists()
    assert out.count("SIGINT: cancelling the run") == 1, out


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="child tracking uses /proc")
def test_ctrl_c_ends_the_child_processes_of_a_body_on_the_loops_thread(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    proc = spawn(["child"], tmp_path, {"ZUKE_STATE": "off"})
    wait_until(lambda: output_of(tmp_path / "child.pid") != "", "the body's child process")
    child = int((tmp_path / "child.pid").read_text())
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc)
    assert code == 130, out
    wait_until(lambda: not alive(child), "the body's child process to be gone")


def test_a_second_ctrl_c_exits_at_once_while_a_body_holds_the_loop(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    log = tmp_path / "out.log"
    proc = spawn(["stubborn"], tmp_path, {"ZUKE_STATE": "off"}, output=log)
    assert started(tmp_path) == "MainThread"
    proc.send_signal(signal.SIGINT)
    wait_until(lambda: "cancelling the run" in output_of(log), "the first signal's answer")
    proc.send_signal(signal.SIGINT)
    code, _ = finish(proc)
    out = output_of(log)
    assert code == 130, out
    assert "SIGINT again: exiting now" in out, out


def test_zuke_cancel_reaches_a_body_on_the_loops_thread(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    proc = spawn(["--state", "after"], tmp_path, {"ZUKE_CANCEL_POLL": "100ms"})
    assert started(tmp_path) == "MainThread"
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (summary,) = store.list_runs()
    code, out = finish(spawn(["cancel", summary.id, "--actor", "ops"], tmp_path))
    assert code == 0, out
    code, owner_out = finish(proc)
    assert code == 130, owner_out
    assert (tmp_path / "told").read_text() == "True"
    assert not (tmp_path / "after").exists()
    found = store.get_run(summary.id)
    assert found is not None and found.record.status == "cancelled"
    assert found.record.targets["after"].status == "skipped"
    assert store.list_locks() == []
