"""A second Ctrl-C (or SIGTERM) while a compensation runs does not kill ``zuke``.

The first signal cancels the run and starts the walk; a later one prints one
line saying which compensation is rolling back and that it finishes first,
and the process goes on: the compensation runs exactly once, is recorded, and
a following sweep has nothing left to do.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.resume_support import MARKER_WRITER, fs_store, lines, record_of, sweep
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build

pytestmark = pytest.mark.e2e

BUILD = (
    MARKER_WRITER
    + """
    import pathlib
    from zuke import Build, parameter, target

    class CD(Build):
        markers = parameter("marker directory").required()

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def deploy(self, t):
            return t.executes(lambda: None).on_cancel(self.rollback)

        @target
        def work(self, t):
            def body(ctx):
                (self._m() / "working").write_text("")
                if not ctx.cancelled.wait(60):
                    raise RuntimeError("never told to stop")
            return t.depends_on(self.deploy).executes(body)

        @target
        def rollback(self, t):
            def body():
                append_line(self._m() / "count", "rollback")
                (self._m() / "started").write_text("")
                wait_for(self._m() / "release", "the release file")
            return t.executes(body)
"""
)

ROLLING_BACK = (
    "SIGINT: rolling back: deploy → rollback in progress; it finishes before zuke exits "
    "(kill -9 to abandon it)"
)


def test_a_second_sigint_mid_compensation_lets_it_finish_and_it_runs_once(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)
    markers = tmp_path / "m"
    markers.mkdir()
    log = tmp_path / "out.log"
    proc = spawn(["work", "--markers", str(markers)], tmp_path, output=log)
    try:
        wait_until(lambda: (markers / "working").exists(), "the body to start")
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: (markers / "started").exists(), "the compensation to start")
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: ROLLING_BACK in output_of(log), "the rolling-back line")
        proc.send_signal(signal.SIGTERM)
        wait_until(lambda: "SIGTERM: rolling back: deploy → rollback" in output_of(log),
                   "the rolling-back line for SIGTERM")  # fmt: skip
        assert proc.poll() is None, output_of(log)  # still there, the compensation running
        (markers / "release").write_text("")
        code, _ = finish(proc)
    finally:
        kill(proc)
    out = output_of(log)
    assert code == 130, out
    assert out.count("rolling back:") == 2, out  # one line per signal
    assert lines(markers / "count") == ["rollback"]
    store = fs_store(tmp_path)
    (summary,) = store.list_runs()
    record = record_of(store, summary.id)
    assert record.status == "cancelled" and record.locks == {}
    assert [(e.tool, e.args.get("target"), e.outcome) for e in record.events
            if e.tool in ("compensating", "compensate")] == [
        ("compensating", "deploy", "ok"), ("compensate", "deploy", "ok"),
    ]  # fmt: skip
    version = store.get_run(summary.id)

    code, swept = sweep(tmp_path)
    assert code == 0, swept
    assert lines(markers / "count") == ["rollback"]  # the sweep ran nothing more
    assert store.get_run(summary.id) == version
