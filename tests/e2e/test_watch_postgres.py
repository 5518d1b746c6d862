"""The watcher on Postgres wakes on a signal long before its interval (LISTEN/NOTIFY).

``--every 1h``: the run can only be resumed within the test's deadline if the
signal's NOTIFY woke the watcher. The signal is appended straight to the store
(as a deliverer that found the run held does), so nothing but the watcher can
resume the run. Every wait is a poll with a deadline.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.resume_support import MARKER_WRITER, lines, record_of, suspend
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build
from tests.pg_support import PgCluster
from tests.state.pg_store_support import listeners
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunRecord, Signal
from zuke.state.update import update_run

pytestmark = pytest.mark.e2e

BUILD = (
    MARKER_WRITER
    + """
    import pathlib
    from zuke import Build, external_signal, target

    HERE = pathlib.Path(__file__).parent

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(external_signal("approved")).timeout("72h"))

        @target
        def promote(self, t):
            def body(ctx):
                append_line(HERE / "promoted.log", ctx.signals["approved"].data["by"])
            return t.depends_on(self.approve).executes(body)
"""
)


def test_the_watcher_wakes_on_a_signal_well_before_its_interval(
    tmp_path: Path, pg_cluster: PgCluster
) -> None:
    url = pg_cluster.create_database()
    env = {"ZUKE_STATE": url}
    write_build(tmp_path, BUILD)
    run_id = suspend(tmp_path, ["promote"], env)
    store = PostgresStateStore(url)
    out = tmp_path / "watch.out"
    watcher = spawn(["resume", "--check", "--watch", "--every", "1h"], tmp_path, env,
                    output=out)  # fmt: skip
    try:
        wait_until(lambda: "Checked 1 suspended run(s)" in output_of(out), "the first sweep")
        wait_until(lambda: listeners(store) >= 1, "the watcher to LISTEN")

        def deliver(fresh: RunRecord) -> RunDelta:
            signal_ = Signal(data={"by": "qa"}, received_at="2026-01-01T00:00:00.000Z", id="s1")
            return RunDelta(updated_at=fresh.updated_at, signals={"approved": signal_})

        update_run(store, run_id, deliver)
        wait_until(lambda: record_of(store, run_id).status == "succeeded",
                   "the watcher to resume the run (an hour before its interval)")  # fmt: skip
        wait_until(lambda: "Checked 1 suspended run(s): 1 resumed" in output_of(out),
                   "the woken sweep's report")  # fmt: skip
        watcher.send_signal(signal.SIGTERM)
        code, _ = finish(watcher)
    finally:
        kill(watcher)
        store.close()
    text = output_of(out)
    assert code == 0, text
    assert lines(tmp_path / "promoted.log") == ["qa"]
    assert f"{run_id} Release [approve]: resumed → succeeded" in text
    assert text.strip().splitlines()[-1].startswith("zuke: SIGTERM: the watcher stopped after")
