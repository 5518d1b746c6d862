"""Fan-outs in real ``zuke`` processes: cancelled mid-batch, and suspended per item.

A SIGTERM or a ``zuke cancel`` from another process while two items are in
flight unwinds the items that succeeded *and* those in flight, last item
first, before the fan-out's dependencies; a fan-out whose items hold gates
suspends in one process and is resumed item by item from others.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.resume_support import (
    MARKER_WRITER,
    actions,
    fs_store,
    lines,
    record_of,
    suspend,
    sweep,
)
from tests.e2e.support import alive, finish, kill, spawn, wait_until, write_build
from zuke.state.records import RunRecord

pytestmark = pytest.mark.e2e

CANCEL_BUILD = (
    MARKER_WRITER
    + """
    import asyncio, pathlib, subprocess
    from zuke import Build, parameter, target

    class CD(Build):
        markers = parameter("marker directory").required()
        repos = parameter("the services").array()

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def prepare(self, t):
            return t.executes(lambda: None).on_cancel(self.unprepare)

        @target
        def unprepare(self, t):
            return t.executes(lambda: append_line(self._m() / "undo", "unprepare"))

        @target
        def batch(self, t):
            return t.depends_on(self.prepare).for_each(
                lambda: self.repos.value, self._stages, lambda s: s.concurrency(2)
            ).on_cancel(self.unbatch)

        @target
        def unbatch(self, t):
            return t.executes(lambda: append_line(self._m() / "undo", "unbatch"))

        def _undo(self, stage):
            # The item comes from the stage's own ctx.state, not the closure.
            return target().executes(lambda ctx: append_line(
                self._m() / "undo", f"un{stage} {ctx.state.get()['repo']}"))

        def _stages(self, repo, index):
            m = self._m()

            def build(ctx):
                ctx.state.set({"repo": repo})
                append_line(m / "ran", f"build {repo}")

            def deploy(ctx):  # a: done at once; others: a child process, then ctx.cancelled
                ctx.state.set({"repo": repo})
                append_line(m / "ran", f"deploy {repo}")
                if repo == "a":
                    return
                child = subprocess.Popen(["sleep", "60"])
                (m / f"child-{repo}").write_text(str(child.pid))
                (m / f"in-flight-{repo}").write_text("")
                if not ctx.cancelled.wait(60):
                    raise RuntimeError("never told to stop")

            async def deploy_async(ctx):
                ctx.state.set({"repo": repo})
                append_line(m / "ran", f"deploy {repo}")
                (m / f"in-flight-{repo}").write_text("")
                await asyncio.sleep(60)

            return {
                "build": target().executes(build).on_cancel(self._undo("build")),
                "deploy": target().executes(deploy_async if repo == "c" else deploy)
                                  .on_cancel(self._undo("deploy")),
            }
"""
)
#: a succeeded; b (sync) and c (async) in flight; d never started. Last item first,
#: each item's stages last to first, then the fan-out's dependency. The fan-out itself
#: did not succeed, so its own compensation (unbatch) does not run.
UNWOUND = ["undeploy c", "unbuild c", "undeploy b", "unbuild b", "undeploy a", "unbuild a",
           "unprepare"]  # fmt: skip
COMPENSATED = ["batch[c].deploy", "batch[c].build", "batch[b].deploy", "batch[b].build",
               "batch[a].deploy", "batch[a].build", "prepare"]  # fmt: skip


def start_batch(
    workdir: Path, env: dict[str, str] | None = None
) -> tuple[Path, subprocess.Popen[str]]:
    """``zuke batch`` over a, b, c, d, returned once b and c are in flight."""
    write_build(workdir, CANCEL_BUILD)
    markers = workdir / "m"
    markers.mkdir()
    argv = ["batch", "--markers", str(markers), "--repos", "a,b,c,d"]
    proc = spawn(argv, workdir, env)
    try:
        wait_until(
            lambda: (markers / "in-flight-b").exists() and (markers / "in-flight-c").exists(),
            "items b and c to be in flight",
        )
    except BaseException:
        kill(proc)
        raise
    return markers, proc


def only_run(workdir: Path) -> RunRecord:
    (summary,) = fs_store(workdir).list_runs()
    return record_of(fs_store(workdir), summary.id)


def assert_unwound(workdir: Path, markers: Path) -> RunRecord:
    """The run ended cancelled, every item that succeeded or was in flight undone once."""
    record = only_run(workdir)
    assert record.status == "cancelled" and record.locks == {}
    assert lines(markers / "undo") == UNWOUND
    compensated = [e for e in record.events if e.tool == "compensate"]
    assert [e.args["target"] for e in compensated] == COMPENSATED
    assert {e.outcome for e in compensated} == {"ok"}
    for name in ("batch[b].deploy", "batch[c].deploy"):
        assert (record.targets[name].status, record.targets[name].interrupted) == (
            "failed", True,
        ), name  # fmt: skip
    assert all(record.targets[f"batch[d].{s}"].status == "skipped" for s in ("build", "deploy"))
    assert sorted(lines(markers / "ran")) == [
        "build a", "build b", "build c", "deploy a", "deploy b", "deploy c",
    ]  # fmt: skip
    assert fs_store(workdir).list_locks() == []  # lease, cancel lock: all given back
    return record


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="child tracking uses /proc")
def test_sigterm_mid_fan_out_unwinds_succeeded_and_in_flight_items_last_first(
    tmp_path: Path,
) -> None:
    markers, proc = start_batch(tmp_path)
    child = int((markers / "child-b").read_text())
    proc.send_signal(signal.SIGTERM)
    code, out = finish(proc)
    assert code == 130, out
    assert "7 compensation(s) ran" in out, out
    assert_unwound(tmp_path, markers)
    wait_until(lambda: not alive(child), "the in-flight body's child process to be gone")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="child tracking uses /proc")
def test_zuke_cancel_from_a_second_process_makes_the_fan_out_unwind_in_its_own_process(
    tmp_path: Path,
) -> None:
    markers, proc = start_batch(tmp_path, {"ZUKE_CANCEL_POLL": "100ms"})
    child = int((markers / "child-b").read_text())
    run_id = only_run(tmp_path).id
    code, out = finish(spawn(["cancel", run_id, "--actor", "ops"], tmp_path))
    assert code == 0, out
    assert "cancelled by its owner" in out, out
    code, owner_out = finish(proc)
    assert code == 130, owner_out
    assert "was cancelled by ops" in owner_out, owner_out
    assert "batch[b].deploy: cancelled by ops" in owner_out, owner_out
    record = assert_unwound(tmp_path, markers)
    (asked,) = [e for e in record.events if e.tool == "cancel" and e.actor == "ops"]
    assert record.events.index(asked) < [e.tool for e in record.events].index("compensate")
    wait_until(lambda: not alive(child), "the in-flight body's child process to be gone")


GATE_BUILD = (
    MARKER_WRITER
    + """
    import os, pathlib
    from zuke import Build, external_signal, parameter, resume_when, target

    class Rollout(Build):
        markers = parameter("marker directory").required()
        repos = parameter("the services").array()

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def batch(self, t):
            return t.for_each(lambda: self.repos.value, self._stages, lambda s: s.concurrency(3))

        @target
        def announce(self, t):
            return t.depends_on(self.batch).executes(
                lambda: append_line(self._m() / "ran", "announce"))

        def _stages(self, repo, index):
            m = self._m()

            def gate(s):
                if repo == "c":  # c waits on a predicate (a sweep checks it), the others a signal
                    s.on(resume_when(lambda: (m / "open-c").exists()))
                else:
                    s.on(external_signal(f"ok-{repo}"))

            def deploy(ctx):
                append_line(m / "ran", f"deploy {repo} {os.getpid()}")
                if (m / "hold").exists():
                    wait_for(m / "release", "the release marker")

            return {
                "build": target().executes(lambda: append_line(m / "ran", f"build {repo}")),
                "approve": target().waits_for(gate),
                "deploy": target().executes(deploy),
            }
"""
)


def park_batch(workdir: Path, repos: str) -> tuple[str, Path]:
    write_build(workdir, GATE_BUILD)
    markers = workdir / "m"
    markers.mkdir()
    return suspend(workdir, ["announce", "--markers", str(markers), "--repos", repos]), markers


def statuses(record: RunRecord, *names: str) -> list[str]:
    return [record.targets[n].status for n in names]


def ran(markers: Path) -> list[str]:
    """What ran, without the pids."""
    return [" ".join(line.split()[:2]) for line in lines(markers / "ran")]


def test_a_fan_out_with_gates_suspends_and_is_resumed_item_by_item_across_processes(
    tmp_path: Path,
) -> None:
    run_id, markers = park_batch(tmp_path, "a,b,c")
    store = fs_store(tmp_path)
    parked = record_of(store, run_id)
    assert parked.status == "suspended" and parked.targets["batch"].status == "waiting"
    approvals = ("batch[a].approve", "batch[b].approve", "batch[c].approve")
    assert statuses(parked, *approvals) == ["waiting"] * 3
    assert sorted(ran(markers)) == ["build a", "build b", "build c"]  # concurrently

    # Item a's signal resumes item a only: the others stay parked, the run suspends again.
    code, out = finish(spawn(["resume", run_id, "--signal", "ok-a"], tmp_path))
    assert code == 0, out
    assert "is suspended" in out, out
    again = record_of(store, run_id)
    assert again.status == "suspended"
    assert statuses(again, *approvals) == ["succeeded", "waiting", "waiting"]
    assert again.targets["batch[a].deploy"].status == "succeeded"
    assert ran(markers)[3:] == ["deploy a"]

    # Item c's predicate, checked by a sweep in a third process.
    (markers / "open-c").write_text("")
    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run_id) == ["resumed"]
    (entry,) = summary["runs"]
    assert (entry["gate"], entry["result"]) == ("batch[c].approve", "suspended")
    assert ran(markers)[4:] == ["deploy c"]

    code, out = finish(spawn(["resume", run_id, "--signal", "ok-b"], tmp_path))
    assert code == 0, out
    done = record_of(store, run_id)
    assert done.status == "succeeded"
    assert {row.status for row in done.targets.values()} == {"succeeded"}
    # No stage a process settled ran again; the fan-out's dependent ran once, last.
    assert sorted(ran(markers)[:3]) == ["build a", "build b", "build c"]
    assert ran(markers)[3:] == ["deploy a", "deploy c", "deploy b", "announce"]


RACE_BUILD = GATE_BUILD.replace(
    """s.on(resume_when(lambda: (m / "open-c").exists()))""", """s.on(external_signal("ok"))"""
).replace("""external_signal(f"ok-{repo}")""", """external_signal("ok")""")


def test_two_processes_race_to_resume_a_suspended_fan_out_and_one_runs_each_item_once(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "m"
    markers.mkdir()
    run_id = suspend(tmp_path, ["announce", "--markers", str(markers), "--repos", "a,b,c"])
    (markers / "hold").write_text("")  # the winner stays in its items until the loser is out
    argv = ["resume", run_id, "--signal", "ok", "--data"]
    procs = [spawn([*argv, json.dumps({"by": i})], tmp_path) for i in range(2)]
    try:
        wait_until(lambda: any(p.poll() is not None for p in procs), "the other deliverer")
        (loser,) = [p for p in procs if p.poll() is not None]
        code, out = finish(loser)
        assert code == 0, out  # its signal is stored (or the first one stands): delivered
        assert "zuke: signal 'ok'" in out and "Traceback" not in out, out
        (markers / "release").write_text("")
        (winner,) = [p for p in procs if p is not loser]
        code, out = finish(winner)
        assert code == 0, out
    finally:
        for proc in procs:
            kill(proc)
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "succeeded"
    assert [e.tool for e in record.events].count("resume") == 1
    assert [e.tool for e in record.events].count("signal") == 1  # the first delivery stands
    deploys = [line.split() for line in lines(markers / "ran") if line.startswith("deploy")]
    assert sorted(d[1] for d in deploys) == ["a", "b", "c"]  # each item's stage once
    assert {int(d[2]) for d in deploys} == {winner.pid}  # all in the winning process
    assert ran(markers).count("announce") == 1
