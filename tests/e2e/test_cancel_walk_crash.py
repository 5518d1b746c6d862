"""A ``zuke`` process killed (``kill -9``) in the middle of its compensation walk.

The run is left ``cancelling`` with the compensations done so far recorded;
``zuke resume --check`` takes the lapsed lease and finishes the walk: a
compensation recorded done never runs again, nor does the one killed while it
ran (its intent was recorded, its end was not: it may be partly done, so it is
recorded failed as interrupted), and the rest run once each, in the walk's
order. Both a plain chain of targets and a fan-out's items (then the fan-out's
own compensation).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.e2e.resume_support import (
    MARKER_WRITER,
    actions,
    fs_store,
    lines,
    record_of,
    sweep,
    wait_for_lease_to_lapse,
)
from tests.e2e.support import kill, spawn, wait_until, write_build
from zuke.state.records import RunRecord

pytestmark = pytest.mark.e2e

SHORT_LEASE = {"ZUKE_RUN_LEASE_TTL": "1s"}

WALK_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, parameter, target

    class CD(Build):
        markers = parameter("marker directory").required()
        repos = parameter("the services").array()

        def _m(self):
            return pathlib.Path(self.markers.value)

        def _undo(self, name, ctx):
            # Logs which process ran it; holds (until the test kills us) if asked to.
            m = self._m()
            append_line(m / "undo", f"{name} {ctx.state.get().get('repo', '-')} {os.getpid()}")
            if (m / f"hold-{name}").exists():
                wait_for(m / "never", "the marker that never comes (the test kills us)")

        def _work(self, ctx):
            (self._m() / "working").write_text("")
            if not ctx.cancelled.wait(60):
                raise RuntimeError("never told to stop")

        # The plain chain: deploy -> migrate -> verify -> plain.
        @target
        def deploy(self, t):
            return t.executes(lambda: None).on_cancel(self.undeploy)

        @target
        def migrate(self, t):
            return t.depends_on(self.deploy).executes(lambda: None).on_cancel(self.unmigrate)

        @target
        def verify(self, t):
            return t.depends_on(self.migrate).executes(lambda: None).on_cancel(self.unverify)

        @target
        def plain(self, t):
            return t.depends_on(self.verify).executes(self._work)

        @target
        def undeploy(self, t):
            return t.executes(lambda ctx: self._undo("undeploy", ctx))

        @target
        def unmigrate(self, t):
            return t.executes(lambda ctx: self._undo("unmigrate", ctx))

        @target
        def unverify(self, t):
            return t.executes(lambda ctx: self._undo("unverify", ctx))

        # The fan-out: batch (items' deploy stages) -> fanned.
        @target
        def batch(self, t):
            return t.for_each(lambda: self.repos.value, self._stages, lambda s: s.concurrency(2)
                              ).on_cancel(self.unbatch)

        def _stages(self, repo, index):
            def stage(ctx):
                ctx.state.set({"repo": repo})
            return {"deploy": target().executes(stage).on_cancel(
                target().executes(lambda ctx: self._undo(f"undeploy-{repo}", ctx)))}

        @target
        def unbatch(self, t):
            return t.executes(lambda ctx: self._undo("unbatch", ctx))

        @target
        def fanned(self, t):
            return t.depends_on(self.batch).executes(self._work)
"""
)


def killed_mid_walk(workdir: Path, root: str, blocking: str) -> tuple[str, Path, int]:
    """Run ``root``, SIGTERM it, and kill -9 it once its walk recorded one compensation and
    is inside ``blocking``; the run id, the markers and the killed process's pid."""
    write_build(workdir, WALK_BUILD)
    markers = workdir / "m"
    markers.mkdir()
    (markers / f"hold-{blocking}").write_text("")
    argv = [root, "--markers", str(markers), "--repos", "a,b,c"]
    proc = spawn(argv, workdir, SHORT_LEASE)
    store = fs_store(workdir)
    try:
        wait_until(lambda: (markers / "working").exists(), f"{root}'s body to start")
        (summary,) = store.list_runs()
        proc.send_signal(signal.SIGTERM)
        wait_until(
            lambda: any(e.tool == "compensate" for e in record_of(store, summary.id).events),
            "the first compensation to be recorded done",
        )
        wait_until(
            lambda: any(line.startswith(f"{blocking} ") for line in lines(markers / "undo")),
            f"{blocking} to start",
        )
    finally:
        kill(proc)
    (markers / f"hold-{blocking}").unlink()
    record = record_of(store, summary.id)
    assert record.status == "cancelling" and record.intended_terminal == "cancelled"
    return summary.id, markers, proc.pid


def walked(markers: Path) -> list[tuple[str, str, int]]:
    """Every compensation that ran: (name, the item it saw, its process)."""
    return [(n, repo, int(pid)) for n, repo, pid in (x.split() for x in lines(markers / "undo"))]


def finish_walk(workdir: Path, run_id: str) -> RunRecord:
    """The sweep, once the dead walker's lease has lapsed (its cancel lock is taken over)."""
    store = fs_store(workdir)
    wait_for_lease_to_lapse(store, run_id)
    code, summary = sweep(workdir)
    assert code == 0, summary
    assert actions(summary, run_id) == ["reaped"]
    record = record_of(store, run_id)
    assert record.status == "cancelled" and record.locks == {}
    assert store.list_locks() == []
    return record


def compensated(record: RunRecord) -> list[str]:
    return [e.args["target"] for e in record.events if e.tool == "compensate"]


def interrupted(record: RunRecord) -> list[str]:
    return [
        e.args["target"]
        for e in record.events
        if e.tool == "compensate" and e.outcome == "error" and "interrupted" in (e.detail or "")
    ]


def test_a_plain_walk_killed_mid_rollback_is_finished_by_the_sweep_never_repeating_one(
    tmp_path: Path,
) -> None:
    run_id, markers, dead = killed_mid_walk(tmp_path, "plain", "unmigrate")
    record = finish_walk(tmp_path, run_id)
    (swept,) = {pid for _, _, pid in walked(markers)} - {dead}
    assert walked(markers) == [
        ("unverify", "-", dead),  # recorded done before the kill: never again
        ("unmigrate", "-", dead),  # killed while it ran: may be partly done, never again
        ("undeploy", "-", swept),
    ]
    assert compensated(record) == ["verify", "migrate", "deploy"]
    assert interrupted(record) == ["migrate"]


def test_a_fan_out_walk_killed_mid_rollback_is_finished_by_the_sweep_never_repeating_one(
    tmp_path: Path,
) -> None:
    run_id, markers, dead = killed_mid_walk(tmp_path, "fanned", "undeploy-b")
    record = finish_walk(tmp_path, run_id)
    (swept,) = {pid for _, _, pid in walked(markers)} - {dead}
    assert walked(markers) == [
        ("undeploy-c", "c", dead),  # items last first, each with its own ctx.state
        ("undeploy-b", "b", dead),  # killed while it ran: not run again
        ("undeploy-a", "a", swept),
        ("unbatch", "-", swept),  # the fan-out's own compensation after its items
    ]
    assert compensated(record) == ["batch[c].deploy", "batch[b].deploy", "batch[a].deploy",
                                   "batch"]  # fmt: skip
    assert interrupted(record) == ["batch[b].deploy"]


def test_a_sweep_finishes_a_killed_walk_as_soon_as_the_run_lease_has_lapsed(
    tmp_path: Path,
) -> None:
    run_id, markers, dead = killed_mid_walk(tmp_path, "plain", "unmigrate")
    store = fs_store(tmp_path)
    wait_for_lease_to_lapse(store, run_id)
    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run_id) == ["reaped"], summary
    assert record_of(store, run_id).status == "cancelled"
    assert [name for name, _, pid in walked(markers) if pid != dead] == ["undeploy"]
