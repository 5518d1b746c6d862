"""``zuke resume --check --watch`` as a real process: SIGTERM stops it between runs.

SIGTERM while the sweep is inside a slow gate check: that run's transition
completes exactly once, its record whole and its lease given back, then the
watcher exits 0 with one line. SIGTERM while idle: it exits at once. Every
wait is a poll with a deadline (a marker file, a line of output).
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.resume_support import MARKER_WRITER, fs_store, lines, record_of, suspend, sweep
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build

pytestmark = pytest.mark.e2e

BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, resume_when, target

    HERE = pathlib.Path(__file__).parent

    def approved():
        if os.environ.get("WATCHER") != "1":
            return False  # the run's own first check, and other sweeps: not yet
        append_line(HERE / "checks.log", "checking")
        wait_for(HERE / "go", "go")  # the slow check: SIGTERM lands in here
        return True

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(resume_when(approved)))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(
                lambda: append_line(HERE / "promoted.log", "promote"))
"""
)

STOPPED = "zuke: SIGTERM: the watcher stopped after 1 sweep(s)"


def stopped_by_sigterm(
    watcher: subprocess.Popen[str],
    out: Path,
    ready: Callable[[], bool],
    what: str,
    then: Callable[[], object] = lambda: None,
) -> str:
    """SIGTERM the watcher once ``ready``, then ``then()``: it exits 0, its last line the
    stop line; its output."""
    try:
        wait_until(ready, what)
        watcher.send_signal(signal.SIGTERM)
        then()
        code, _ = finish(watcher)
    finally:
        kill(watcher)
    text = output_of(out)
    assert code == 0, text
    assert text.strip().splitlines()[-1] == STOPPED
    return text


def test_sigterm_inside_a_slow_gate_check_finishes_that_run_once_then_exits_0(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)
    first = suspend(tmp_path, ["promote"])
    second = suspend(tmp_path, ["promote"])
    out = tmp_path / "watch.out"
    watcher = spawn(["resume", "--check", "--watch", "--every", "1h"], tmp_path,
                    {"WATCHER": "1"}, output=out)  # fmt: skip
    stopped_by_sigterm(
        watcher, out, lambda: lines(tmp_path / "checks.log") == ["checking"], "the gate check",
        then=lambda: (tmp_path / "go").write_text("go"),  # the check answers after the signal
    )  # fmt: skip
    assert lines(tmp_path / "promoted.log") == ["promote"]  # the run in hand, exactly once
    assert lines(tmp_path / "checks.log") == ["checking"]  # the next run was left alone
    store = fs_store(tmp_path)
    records = {run_id: record_of(store, run_id) for run_id in (first, second)}
    done = [r for r in records.values() if r.status == "succeeded"]
    assert len(done) == 1 and {t.status for t in done[0].targets.values()} == {"succeeded"}
    assert sorted(r.status for r in records.values()) == ["succeeded", "suspended"]
    assert store.list_locks() == []  # the lease given back
    code, summary = sweep(tmp_path)  # a later sweep: nothing is resumed twice
    assert code == 0 and summary["counts"]["resumed"] == 0
    assert lines(tmp_path / "promoted.log") == ["promote"]


def test_sigterm_while_idle_exits_0_at_once(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    suspend(tmp_path, ["promote"])
    out = tmp_path / "watch.out"
    watcher = spawn(["resume", "--check", "--watch", "--every", "1h"], tmp_path, output=out)
    # It stops well before the hour: the wait is interrupted.
    text = stopped_by_sigterm(
        watcher, out, lambda: "Checked 1 suspended run(s)" in output_of(out), "the first sweep"
    )
    assert "still-waiting" in text


SLOW_TARGET_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, resume_when, target

    HERE = pathlib.Path(__file__).parent

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(resume_when(
                lambda: os.environ.get("WATCHER") == "1")))

        @target
        def promote(self, t):
            def body():
                append_line(HERE / "promoting.log", "promoting")
                wait_for(HERE / "go", "go")  # SIGTERM lands while the resumed run runs this
                append_line(HERE / "promoted.log", "promote")
            return t.depends_on(self.approve).executes(body)
"""
)


def test_sigterm_while_a_resumed_run_runs_lets_it_finish_and_never_cancels_it(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, SLOW_TARGET_BUILD)
    run_id = suspend(tmp_path, ["promote"])
    out = tmp_path / "watch.out"
    watcher = spawn(["resume", "--check", "--watch"], tmp_path, {"WATCHER": "1"}, output=out)
    stopped_by_sigterm(
        watcher, out, lambda: lines(tmp_path / "promoting.log") == ["promoting"], "the target",
        then=lambda: (tmp_path / "go").write_text("go"),
    )  # fmt: skip
    assert lines(tmp_path / "promoted.log") == ["promote"]
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "succeeded"  # not cancelled: the watcher's signal is not the run's
    assert {t.status for t in record.targets.values()} == {"succeeded"}
    assert fs_store(tmp_path).list_locks() == []
