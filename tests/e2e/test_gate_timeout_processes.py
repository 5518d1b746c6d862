"""Gate timeouts through the real ``zuke resume --check``: each disposition, signal vs timeout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.resume_support import (
    MARKER_WRITER,
    actions,
    fs_store,
    gate_deadline,
    lines,
    record_of,
    suspend,
    sweep,
    wait_for_lease_to_lapse,
    wait_past,
)
from tests.e2e.support import finish, kill, spawn, wait_until, write_build
from zuke._clock import parse_iso

pytestmark = pytest.mark.e2e

GATE_BUILD = (
    MARKER_WRITER
    + """
    import json, os, pathlib
    from zuke import Build, external_signal, parameter, target

    class Gate(Build):
        markers = parameter("marker directory").required()
        window = parameter("the gate's timeout").default("1s")
        disposition = parameter("fail, cancel-run or rollback").default("fail")

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def prep(self, t):
            return t.proceed_after_failure().executes(self._prep)

        def _prep(self):
            # What the test wants of this attempt: fail, hold (until killed) or pass.
            phase = (self._m() / "phase").read_text() if (self._m() / "phase").exists() else ""
            append_line(self._m() / "prep", f"{os.getpid()} {phase}")
            if phase == "fail":
                raise RuntimeError("prep failed (the test asked for it)")
            if phase == "hold":
                wait_for(self._m() / "never", "the marker that never comes (the test kills us)")

        @target
        def approve(self, t):
            return t.depends_on(self.prep).waits_for(self._configure)

        def _configure(self, s):
            s.on(external_signal("ok")).timeout(self.window.value)
            d = self.disposition.value
            s.on_timeout(self.rollback if d == "rollback" else d)

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(
                lambda ctx: append_line(self._m() / "promote", json.dumps(ctx.signals["ok"].data))
            )

        @target
        def rollback(self, t):
            return t.executes(self._rollback)

        def _rollback(self, ctx):
            append_line(self._m() / "rollback", f"{os.getpid()} redriven={ctx.redriven}")
            if (self._m() / "hold-rollback").exists():
                wait_for(self._m() / "rollback-go", "the rollback's release")
"""
)


def park(workdir: Path, *args: str, prep: str = "pass") -> tuple[str, Path]:
    """Suspend a run at ``approve`` (``prep`` passing or failing); its id and marker directory."""
    write_build(workdir, GATE_BUILD)
    markers = workdir / "m"
    markers.mkdir()
    (markers / "phase").write_text(prep)
    return suspend(workdir, ["promote", "--markers", str(markers), *args]), markers


@pytest.mark.parametrize(
    ("disposition", "final", "exit_code"),
    [("fail", "failed", 1), ("cancel-run", "cancelled", 0), ("rollback", "cancelled", 0)],
)
def test_a_gate_past_its_deadline_takes_its_timeout_disposition_in_the_sweep(
    tmp_path: Path, disposition: str, final: str, exit_code: int
) -> None:
    run_id, markers = park(tmp_path, "--disposition", disposition)
    store = fs_store(tmp_path)
    wait_past(gate_deadline(record_of(store, run_id), "approve"), "the gate's deadline")

    code, summary = sweep(tmp_path)
    assert code == exit_code, summary
    (entry,) = summary["runs"]
    assert (entry["id"], entry["action"], entry["gate"], entry["result"]) == (
        run_id, "timed-out", "approve", final,
    )  # fmt: skip
    assert summary["counts"]["timed_out"] == 1
    record = record_of(store, run_id)
    assert record.status == final
    assert record.targets["approve"].status == "failed"
    assert "timed out" in (record.targets["approve"].error or "")
    assert record.targets["promote"].status == "skipped"
    assert [e.tool for e in record.events].count("timeout") == 1
    assert lines(markers / "promote") == []
    ran_rollback = len(lines(markers / "rollback"))
    assert ran_rollback == (1 if disposition == "rollback" else 0)
    if disposition == "rollback":
        assert record.targets["rollback"].status == "succeeded"

    code, again = sweep(tmp_path)
    assert code == 0 and again["runs"] == [], again


def test_a_signal_received_before_the_deadline_wins_in_a_sweep_that_runs_after_it(
    tmp_path: Path,
) -> None:
    run_id, markers = park(tmp_path, "--window", "4s", prep="fail")
    (markers / "phase").write_text("hold")
    store = fs_store(tmp_path)
    # The signal lands before the deadline; its resumer dies before it checks the gate
    # (prep, which the gate depends on, failed before: it runs again and is killed mid-body).
    resumer = spawn(["resume", run_id, "--signal", "ok", "--data", '{"by": "qa"}'], tmp_path,
                    {"ZUKE_RUN_LEASE_TTL": "1s"})  # fmt: skip
    try:
        wait_until(lambda: len(lines(markers / "prep")) == 2, "the resumer to run prep again")
    finally:
        kill(resumer)
    parked = record_of(store, run_id)
    received = parse_iso(parked.signals["ok"].received_at)
    deadline = gate_deadline(parked, "approve")
    assert received is not None and received <= (parse_iso(deadline or "") or 0)
    assert parked.status == "running" and parked.targets["approve"].status == "waiting"
    (markers / "phase").write_text("pass")
    wait_past(deadline, "the gate's deadline")
    wait_for_lease_to_lapse(store, run_id)

    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run_id) == ["reaped", "resumed"]
    record = record_of(store, run_id)
    assert record.status == "succeeded"
    assert "timeout" not in [e.tool for e in record.events]
    assert [json.loads(line) for line in lines(markers / "promote")] == [{"by": "qa"}]


def test_a_signal_after_the_deadline_loses_to_the_timeout_and_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    run_id, markers = park(tmp_path)
    store = fs_store(tmp_path)
    wait_past(gate_deadline(record_of(store, run_id), "approve"), "the gate's deadline")

    # The late signal and the sweep race; whichever goes first, the timeout wins.
    checker = spawn(["resume", "--check", "--json"], tmp_path)
    late = spawn(["resume", run_id, "--signal", "ok", "--data", '{"by": "late"}'], tmp_path)
    code, out = finish(late)
    finish(checker)
    assert code == 1, out
    assert "timed out" in out and "approve" in out and "not delivered" in out, out
    assert "Traceback" not in out, out
    record = record_of(store, run_id)
    assert record.status == "failed"
    assert "ok" not in record.signals
    assert [e.tool for e in record.events].count("timeout") == 1
    assert lines(markers / "promote") == []

    # Refused the same way once the timeout is settled.
    code, out = finish(spawn(["resume", run_id, "--signal", "ok"], tmp_path))
    assert code == 1, out
    assert "timed out" in out and "came too late and was not delivered" in out, out


def test_a_sweep_killed_mid_rollback_is_reaped_and_the_rollback_finishes_without_rearming(
    tmp_path: Path,
) -> None:
    run_id, markers = park(tmp_path, "--disposition", "rollback")
    (markers / "hold-rollback").write_text("")
    store = fs_store(tmp_path)
    wait_past(gate_deadline(record_of(store, run_id), "approve"), "the gate's deadline")
    sweeper = spawn(["resume", "--check"], tmp_path, {"ZUKE_RUN_LEASE_TTL": "1s"})
    try:
        wait_until(lambda: len(lines(markers / "rollback")) == 1, "the rollback to start")
    finally:
        kill(sweeper)
    (markers / "rollback-go").write_text("")
    wait_for_lease_to_lapse(store, run_id)

    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run_id) == ["reaped", "resumed"]
    record = record_of(store, run_id)
    assert record.status == "cancelled"
    assert {n: r.status for n, r in record.targets.items()} == {
        "prep": "succeeded",
        "approve": "failed",
        "promote": "skipped",
        "rollback": "succeeded",
    }
    assert record.targets["approve"].waiting_for is None
    assert [e.tool for e in record.events].count("timeout") == 1
    first, second = lines(markers / "rollback")
    assert first.endswith("redriven=False") and second.endswith("redriven=True")
    assert lines(markers / "promote") == []
    code, again = sweep(tmp_path)
    assert code == 0 and again["runs"] == [], again
