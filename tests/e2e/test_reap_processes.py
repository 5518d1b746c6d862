"""Reaping between real processes: kill -9, a SIGSTOPped holder, owed effects, foreign runs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.postgres_axis import STORE_AXIS, axis_store
from tests.e2e.resume_support import (
    MARKER_WRITER,
    actions,
    fs_store,
    lines,
    record_of,
    suspend,
    sweep,
    version_of,
    wait_for_lease_to_lapse,
    wait_past,
)
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build
from tests.serve.support import TOKEN, running_server
from zuke.state._protocol import StateStore
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.http import HttpStateStore

pytestmark = pytest.mark.e2e

SHORT_LEASE = {"ZUKE_RUN_LEASE_TTL": "1s"}

SHIP_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib, time
    from zuke import Build, parameter, resume_when, target

    class Ship(Build):
        markers = parameter("marker directory").required()
        budget = parameter("the run's deadline, if any").default("")

        def deadline(self):
            return self.budget.value or None

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def compile(self, t):
            return t.executes(self._compile)

        def _compile(self, ctx):
            m = self._m()
            append_line(m / "compile", f"{os.getpid()} {ctx.run_id} redriven={ctx.redriven}")
            deadline = time.monotonic() + 60
            while not ((m / "go").exists() or (m / f"go-{os.getpid()}").exists()):
                if ctx.cancelled.is_set():
                    raise RuntimeError("told to stop")
                if time.monotonic() > deadline:
                    raise RuntimeError("the test never let compile finish")
                time.sleep(0.01)

        @target
        def release(self, t):
            return t.depends_on(self.compile).executes(lambda: None).effect(
                "notify", self._notify
            )

        def _notify(self, ctx):
            m = self._m()
            append_line(m / "notify", f"{os.getpid()} redriven={ctx.redriven}")
            if not ctx.redriven:
                wait_for(m / "never", "the marker that never comes (the test kills us)")

        @target
        def announce(self, t):
            return t.depends_on(self.release).executes(
                lambda: append_line(self._m() / "announce", str(os.getpid()))
            )

        @target
        def approve(self, t):
            return t.waits_for(
                lambda s: s.on(resume_when(lambda: (self._m() / "approved").exists()))
            )
"""
)


def start(
    workdir: Path, root: str, markers: Path, env: dict[str, str] | None = None, *args: str
) -> subprocess.Popen[str]:
    """``zuke ROOT`` with a 1 s run lease, its output to a file."""
    markers.mkdir(exist_ok=True)
    argv = [root, "--state", "--markers", str(markers), *args]
    out = workdir / f"{root}-{markers.name}.out"
    return spawn(argv, workdir, {**SHORT_LEASE, **(env or {})}, output=out)


def test_a_run_killed_mid_body_is_reaped_and_completed_and_a_second_sweep_is_a_no_op(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, SHIP_BUILD)
    markers = tmp_path / "m"
    proc = start(tmp_path, "compile", markers)
    store = fs_store(tmp_path)
    try:
        wait_until(lambda: len(lines(markers / "compile")) == 1, "compile's body to start")
        (run,) = store.list_runs()
        kill(proc)
    finally:
        kill(proc)
    assert record_of(store, run.id).status == "running"
    (markers / "go").write_text("")
    wait_for_lease_to_lapse(store, run.id)

    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run.id) == ["reaped", "resumed"]
    done = record_of(store, run.id)
    assert done.status == "succeeded"
    assert [e.tool for e in done.events].count("reap") == 1
    first, second = lines(markers / "compile")
    assert first.endswith("redriven=False") and second.endswith("redriven=True")

    version = version_of(store, run.id)
    code, again = sweep(tmp_path)
    assert code == 0 and again["runs"] == [], again
    assert version_of(store, run.id) == version
    assert len(lines(markers / "compile")) == 2


@STORE_AXIS
def test_an_owed_effect_of_a_killed_run_is_re_driven_exactly_once_and_sees_redriven(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    write_build(tmp_path, SHIP_BUILD)
    axis = axis_store(kind, tmp_path, request)
    # Postgres: the first call (import, connect, schema check) takes part of the first period.
    env = axis.with_env({} if kind == "fs" else {"ZUKE_RUN_LEASE_TTL": "3s"})
    markers = tmp_path / "m"
    markers.mkdir()
    (markers / "go").write_text("")
    proc = start(tmp_path, "announce", markers, env)
    store = axis.store
    try:
        wait_until(lambda: len(lines(markers / "notify")) == 1, "the effect's body to start")
        (run,) = store.list_runs()
        # The intent was recorded (and fsynced) before the effect's body started.
        owed = record_of(store, run.id).targets["release"].effects["notify"]
        assert (owed.status, owed.attempts) == ("pending", 1)
        kill(proc)
    finally:
        kill(proc)
    wait_for_lease_to_lapse(store, run.id)

    # Two sweeps race for the abandoned run: one reaps and resumes it, the other stands by.
    sweepers = [spawn(["resume", "--check", "--json"], tmp_path, axis.env) for _ in range(2)]
    summaries = []
    for proc in sweepers:
        code, out = finish(proc)
        assert code == 0, out
        summaries.append(json.loads(out[out.index("{\n") :]))
    both = [action for summary in summaries for action in actions(summary, run.id)]
    assert sorted(both) in (["reaped", "resumed"], ["reaped", "resumed", "skipped-held"]), both
    done = record_of(store, run.id)
    assert done.status == "succeeded"
    assert [e.tool for e in done.events].count("reap") == 1
    effect = done.targets["release"].effects["notify"]
    assert (effect.status, effect.attempts) == ("done", 2)
    assert effect.intent_at == owed.intent_at
    first, second = lines(markers / "notify")
    assert first.endswith("redriven=False") and second.endswith("redriven=True")
    assert len(lines(markers / "announce")) == 1
    assert len(lines(markers / "compile")) == 1  # compile had succeeded: never again

    code, again = sweep(tmp_path, axis.env)
    assert code == 0 and again["runs"] == [], again
    assert len(lines(markers / "notify")) == 2


@pytest.mark.parametrize("body_finishes", [True, False], ids=["body-done", "body-blocked"])
def test_a_paused_holder_whose_lease_was_taken_over_stops_on_sigcont_and_writes_nothing(
    tmp_path: Path, body_finishes: bool
) -> None:
    write_build(tmp_path, SHIP_BUILD)
    paused_holder_is_taken_over(tmp_path, fs_store(tmp_path), {}, body_finishes=body_finishes)


def test_a_paused_holder_taken_over_writes_nothing_against_zuke_serve(tmp_path: Path) -> None:
    write_build(tmp_path, SHIP_BUILD)
    with running_server(tmp_path) as server:
        env = {"ZUKE_STATE_URL": server.url, "ZUKE_STATE_TOKEN": TOKEN}
        with HttpStateStore(server.url, token=TOKEN) as store:
            paused_holder_is_taken_over(tmp_path, store, env, body_finishes=True)


def paused_holder_is_taken_over(
    workdir: Path, store: StateStore, env: dict[str, str], *, body_finishes: bool
) -> None:
    """SIGSTOP a holder, let a sweep reap and resume its run, SIGCONT it: it must stop."""
    markers = workdir / "m"
    holder = start(workdir, "compile", markers, env)
    sweeper = None
    try:
        wait_until(lambda: len(lines(markers / "compile")) == 1, "the holder's body to start")
        run_id = lines(markers / "compile")[0].split()[1]
        os.kill(holder.pid, signal.SIGSTOP)
        wait_for_lease_to_lapse(store, run_id)
        sweeper = spawn(["resume", "--check", "--json"], workdir, env,
                        output=workdir / "sweep.out")  # fmt: skip
        wait_until(lambda: len(lines(markers / "compile")) == 2, "the new owner's body to start")
        lease = f"zuke-run-{run_id}"
        wait_until(
            lambda: record_of(store, run_id).locks.get(lease) is not None,
            "the new owner's lease in the record",
        )
        taken_over = store.get_run(run_id)
        assert taken_over is not None and taken_over.record.status == "running"
        if body_finishes:  # the paused body returns at once: its end must not be written
            (markers / f"go-{holder.pid}").write_text("")
        os.kill(holder.pid, signal.SIGCONT)
        code, _ = finish(holder)
        out = output_of(workdir / "compile-m.out")
        assert code != 0, out
        # Woken past its TTL, it cannot prove it holds the lease: it stops at once, and
        # ends its process (exit 3) if its synchronous body still runs (docs/locks.md).
        # Which it notices first is a race: its renewal's lapse (then it says another
        # process may hold the run already), a write's answer come past the lease's stop
        # point (the writer says the same), or the record naming the new holder.
        lapsed = f"run {run_id} could not be renewed" in out or "its lease could not" in out
        paused = f"Run {run_id} stopped: its lease lapsed while this process was paused" in out
        seen = f"Run {run_id} stopped: its lease was taken over by another process " in out
        assert lapsed or paused or seen, out
        assert code == 3 or "Nothing was rolled back" in out, out
        assert (
            "may have" in out
            or (paused and "another process may hold the run now" in out)
            or (seen and "the new holder owns the run" in out)
        ), out
        assert store.get_run(run_id) == taken_over  # not one write over the new owner

        (markers / f"go-{sweeper.pid}").write_text("")
        code, _ = finish(sweeper)
        assert code == 0, output_of(workdir / "sweep.out")
    finally:
        if holder.poll() is None:
            os.kill(holder.pid, signal.SIGCONT)
        kill(holder)
        if sweeper is not None:
            kill(sweeper)
    done = record_of(store, run_id)
    assert done.status == "succeeded"
    assert done.targets["compile"].error is None
    assert [e.tool for e in done.events].count("reap") == 1


def test_a_foreign_builds_runs_in_a_shared_store_are_left_alone_by_the_sweep(
    tmp_path: Path,
) -> None:
    shared = {"ZUKE_STATE_DIR": str(tmp_path / "shared-state")}
    ours, same_class, other_class = (tmp_path / d for d in ("ours", "same-class", "other"))
    for directory in (ours, same_class, other_class):
        directory.mkdir()
        write_build(directory, SHIP_BUILD)
    other_source = (other_class / "build.py").read_text().replace("class Ship", "class Other")
    (other_class / "build.py").write_text(other_source)
    origin = {**shared, "ZUKE_BUILD_ID": "team-a"}
    markers = tmp_path / "m"
    markers.mkdir()

    # A suspended run whose predicate is true (any sweep of its build would resume it)...
    parked = suspend(ours, ["approve", "--markers", str(markers)], origin)
    (markers / "approved").write_text("")
    # ... and a running one whose process is gone (any sweep of its build would reap it).
    proc = start(ours, "compile", markers, origin)
    try:
        wait_until(lambda: len(lines(markers / "compile")) == 1, "compile's body to start")
    finally:
        kill(proc)
    (markers / "go").write_text("")
    store = FileSystemStateStore(tmp_path / "shared-state")
    (dead,) = [r.id for r in store.list_runs() if r.status == "running"]
    wait_for_lease_to_lapse(store, dead)
    before = {run_id: store.get_run(run_id) for run_id in (parked, dead)}

    code, summary = sweep(same_class, {**shared, "ZUKE_BUILD_ID": "team-b"})
    assert code == 0, summary
    assert actions(summary, parked) == ["skipped-foreign"]
    assert actions(summary, dead) == []
    code, summary = sweep(other_class, origin)
    assert code == 0 and summary["runs"] == [], summary
    assert {run_id: store.get_run(run_id) for run_id in (parked, dead)} == before

    code, summary = sweep(ours, origin)
    assert code == 0, summary
    assert actions(summary, parked) == ["resumed"]
    assert actions(summary, dead) == ["reaped", "resumed"]
    assert record_of(store, parked).status == record_of(store, dead).status == "succeeded"


def test_a_dead_run_past_its_deadline_is_settled_failed_and_a_live_one_is_left_alone(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, SHIP_BUILD)
    dead_m, live_m = tmp_path / "dead", tmp_path / "live"
    dead = start(tmp_path, "compile", dead_m, None, "--budget", "1s")
    live = start(tmp_path, "compile", live_m, None, "--budget", "1s")
    store = fs_store(tmp_path)
    try:
        wait_until(
            lambda: len(lines(dead_m / "compile")) == len(lines(live_m / "compile")) == 1,
            "both bodies to start",
        )
        dead_id, live_id = (lines(m / "compile")[0].split()[1] for m in (dead_m, live_m))
        kill(dead)
        (dead_m / "go").write_text("")  # were it resumed, its body would finish
        wait_past(record_of(store, live_id).deadline_at, "the live run's deadline")
        wait_past(record_of(store, dead_id).deadline_at, "the dead run's deadline")
        wait_for_lease_to_lapse(store, dead_id)
        live_before = store.get_run(live_id)

        code, summary = sweep(tmp_path)
        assert code == 1, summary  # a run the sweep settled failed fails the sweep
        assert actions(summary, dead_id) == ["reaped"], summary
        assert actions(summary, live_id) == [], summary
        settled = record_of(store, dead_id)
        assert settled.status == "failed"
        assert settled.targets["compile"].status == "failed"
        assert "deadline" in (settled.targets["compile"].error or "")
        assert len(lines(dead_m / "compile")) == 1  # settled, not resumed
        assert store.get_run(live_id) == live_before  # a live holder is left alone

        code, summary = sweep(tmp_path, None, live_id)
        assert code == 0 and actions(summary, live_id) == ["left-alone"], summary
        assert store.get_run(live_id) == live_before
        (live_m / "go").write_text("")
        code, out = finish(live)
        assert code == 0, out
    finally:
        kill(dead)
        kill(live)
    assert record_of(store, live_id).status == "succeeded"


def test_a_run_left_cancelling_by_a_dead_owner_is_finished_to_its_intended_terminal(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, SHIP_BUILD)
    markers = tmp_path / "m"
    holder = start(tmp_path, "compile", markers, {"ZUKE_RUN_LEASE_TTL": "4s"})
    store = fs_store(tmp_path)
    try:
        wait_until(lambda: len(lines(markers / "compile")) == 1, "compile's body to start")
        run_id = lines(markers / "compile")[0].split()[1]
        os.kill(holder.pid, signal.SIGSTOP)  # its lease is still live: cancel only marks it
        code, out = finish(spawn(["cancel", run_id, "--wait", "100ms"], tmp_path))
        assert code == 0, out
        assert record_of(store, run_id).status == "cancelling"
    finally:
        kill(holder)  # the owner dies before it could settle the cancel
    wait_for_lease_to_lapse(store, run_id)

    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run_id) == ["reaped"]
    record = record_of(store, run_id)
    assert record.status == "cancelled"
    assert record.targets["compile"].status == "failed"
    assert [e.tool for e in record.events].count("reap") == 1
    assert len(lines(markers / "compile")) == 1  # finished, never re-run
