"""Gate timeouts: each disposition through a resume and through a sweep; signal versus timeout."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import HOUR, Harness, RecordingStore, approval, release_build
from zuke import (
    LockAcquired,
    LockHolder,
    RunError,
    SignalRefusedError,
    WaitSettings,
    external_signal,
    target,
)
from zuke._clock import ManualClock, iso
from zuke._target import TargetBuilder
from zuke.runs import timeouts
from zuke.runs.resume import ResumeOutcome
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, Signal
from zuke.state.update import update_run


def parked(on_timeout: str | None = None, **kwargs: Any) -> tuple[Harness, list[Any], str, int]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    gate = approval(timeout="1h", on_timeout=on_timeout)
    h = Harness(release_build(store, calls, gate=gate, **kwargs), store, clock)
    run_id = h.start().run_id
    calls.clear()
    return h, calls, run_id, clock.now_ms() + HOUR


def by_resume(h: Harness, run_id: str) -> tuple[str, str]:
    outcome = h.resume(run_id)
    assert outcome.action == "timed-out"
    return outcome.action, outcome.status


def by_sweep(h: Harness, run_id: str) -> tuple[str, str]:
    [entry] = h.sweep().entries
    assert entry.gate == "approve"
    return entry.action, entry.result


WAYS = [by_resume, by_sweep]


@pytest.mark.parametrize("way", WAYS, ids=["resume", "sweep"])
def test_a_gate_that_times_out_into_fail_fails_the_gate_and_the_run(way: Any) -> None:
    h, calls, run_id, deadline = parked()
    h.clock.advance(HOUR + 1)
    assert way(h, run_id) == ("timed-out", "failed")
    record = h.record(run_id)
    assert record.status == "failed" and record.intended_terminal == "failed"
    assert h.statuses(run_id) == {
        "deploy": "succeeded", "approve": "failed", "promote": "skipped",
        "lint": "succeeded", "release": "skipped",
    }  # fmt: skip
    assert record.targets["approve"].error == f'wait "approve" timed out (deadline {iso(deadline)})'
    [event] = [e for e in record.events if e.tool == "timeout"]
    assert event.args == {"gate": "approve", "onTimeout": "fail"}
    assert calls == [] and h.store.list_locks() == [] and record.locks == {}


@pytest.mark.parametrize("way", WAYS, ids=["resume", "sweep"])
def test_a_gate_that_times_out_into_cancel_run_cancels_the_run(way: Any) -> None:
    h, calls, run_id, _ = parked("cancel-run")
    h.clock.advance(HOUR + 1)
    assert way(h, run_id) == ("timed-out", "cancelled")
    assert h.record(run_id).status == "cancelled"
    assert h.statuses(run_id)["approve"] == "failed"
    assert calls == [] and h.store.list_locks() == []


@pytest.mark.parametrize("way", WAYS, ids=["resume", "sweep"])
def test_a_cancel_run_timeout_walks_the_compensations_of_what_succeeded(way: Any) -> None:
    def deploy(self: Any, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            ctx.state.set({"at": "sit-api"})

        return t.executes(body).on_cancel(self.rollback)

    h, calls, run_id, _ = parked("cancel-run", extra={"deploy": target(deploy)})
    h.clock.advance(HOUR + 1)
    assert way(h, run_id) == ("timed-out", "cancelled")
    # deploy succeeded before the gate, so its compensation ran, reading deploy's state
    assert calls == [("rollback", {"at": "sit-api"})]
    record = h.record(run_id)
    assert record.status == "cancelled" and record.targets["approve"].status == "failed"
    assert [e.tool for e in record.events if e.tool in ("timeout", "compensate")] == [
        "timeout", "compensate",
    ]  # fmt: skip
    assert h.store.list_locks() == [] and record.locks == {}


@pytest.mark.parametrize("way", WAYS, ids=["resume", "sweep"])
def test_a_gate_that_times_out_into_a_target_runs_the_rollback_then_cancels(way: Any) -> None:
    h, calls, run_id, _ = parked("rollback")
    h.clock.advance(HOUR + 1)
    assert way(h, run_id) == ("timed-out", "cancelled")
    # The rollback reads what the original target recorded while it ran.
    assert calls == [("rollback", {"at": "sit-api"})]
    record = h.record(run_id)
    assert record.status == "cancelled"
    assert h.statuses(run_id)["rollback"] == "succeeded"
    assert h.statuses(run_id)["approve"] == "failed"
    assert h.statuses(run_id)["promote"] == "skipped"
    assert h.store.list_locks() == [] and record.locks == {}


def test_a_failing_rollback_still_cancels_the_run_and_says_how_it_went() -> None:
    def rollback(self: Any, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: 1 / 0)

    h, _, run_id, _ = parked("rollback", extra={"rollback": target(rollback)})
    h.clock.advance(HOUR + 1)
    outcome = h.resume(run_id)
    assert outcome.status == "cancelled"
    assert h.statuses(run_id)["rollback"] == "failed"
    assert h.store.list_locks() == []
    # said as it went, and not handled: the disposition did not do its job (exit 1)
    assert "rollback failed (ZeroDivisionError" in outcome.notes[-1]
    assert "ran rollback" not in outcome.notes[-1] and not outcome.ok


def test_a_rollback_that_fails_in_a_sweep_is_a_failure_of_the_sweep() -> None:
    def rollback(self: Any, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: 1 / 0)

    h, _, _, _ = parked("rollback", extra={"rollback": target(rollback)})
    h.clock.advance(HOUR + 1)
    report = h.sweep()
    [entry] = report.entries
    assert (entry.action, entry.result, entry.handled) == ("timed-out", "cancelled", False)
    assert "rollback failed (ZeroDivisionError" in (entry.detail or "")
    assert not report.ok and report.counts()["failed"] == 1


@pytest.mark.parametrize("way", ["resume", "sweep"])
def test_a_timeout_its_rollback_handled_is_no_failure(way: str) -> None:
    h, _, run_id, _ = parked("rollback")
    h.clock.advance(HOUR + 1)
    if way == "resume":
        outcome = h.resume(run_id)
        assert outcome.ok and outcome.handled and "ran rollback" in outcome.notes[-1]
        assert outcome.result is not None and outcome.result.handled
    else:
        report = h.sweep()
        assert report.ok and report.entries[0].handled


def test_a_rollback_the_build_no_longer_has_is_refused_and_the_lease_given_back() -> None:
    h, calls, run_id, _ = parked("rollback")

    def undo(self: Any, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None)

    def gate(build: Any, s: WaitSettings) -> WaitSettings:
        return s.on(external_signal("approved")).timeout("1h").on_timeout(build.undo)

    renamed = release_build(
        h.store, calls, gate=gate, extra={"undo": target(undo), "rollback": None}
    )
    h.clock.advance(HOUR + 1)
    recording = RecordingStore(h.store)
    with pytest.raises(RunError, match="no longer has; restore that target"):
        Harness(renamed, recording, h.clock).resume(run_id)
    # decided under the lease (on the record read then), and the lease given back
    assert recording.calls == [("acquire", f"zuke-run-{run_id}:LockAcquired"),
                               ("release", f"zuke-run-{run_id}")]  # fmt: skip
    assert h.store.list_locks() == [] and h.record(run_id).status == "suspended"


def test_the_lease_is_taken_before_a_timeout_is_settled_and_released_after() -> None:
    h, _, run_id, _ = parked()
    h.clock.advance(HOUR + 1)
    recording = RecordingStore(h.store)
    Harness(h.build, recording, h.clock).resume(run_id)
    lease = f"zuke-run-{run_id}"
    assert recording.calls == [
        ("acquire", f"{lease}:LockAcquired"),
        ("write", "failed"),
        ("release", lease),
    ]


def test_a_timeout_is_not_settled_while_someone_holds_the_run() -> None:
    h, _, run_id, _ = parked()
    h.clock.advance(HOUR + 1)
    taken = h.store.acquire_lock(f"zuke-run-{run_id}", LockHolder("bob", run_id, "x"), 60_000)
    assert isinstance(taken, LockAcquired)
    [entry] = h.sweep().entries
    assert entry.action == "skipped-held"
    assert h.record(run_id).status == "suspended"


def test_a_signal_after_the_deadline_is_refused_and_the_timeout_applies() -> None:
    h, calls, run_id, deadline = parked()
    h.clock.advance(HOUR + 1)
    outcome = h.resume(run_id, "approved", {"by": "qa"})
    assert (outcome.action, outcome.status, outcome.ok) == ("timed-out", "failed", False)
    assert f"came after gate 'approve''s deadline ({iso(deadline)})" in outcome.notes[0]
    assert "approved" not in h.record(run_id).signals and calls == []


class FirstReadStale:
    """A store whose first ``get_run`` answers what it held before (a resumer that read the
    run just before a sweep settled its timeout)."""

    def __init__(self, inner: Any, stale: Any) -> None:
        self.inner, self.stale = inner, stale

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_run(self, run_id: str) -> Any:
        stale, self.stale = self.stale, None
        return stale if stale is not None else self.inner.get_run(run_id)


def test_a_late_signal_racing_the_sweep_that_settles_the_timeout_is_refused_naming_it() -> None:
    h, calls, run_id, deadline = parked()
    h.clock.advance(HOUR + 1)
    before = h.store.get_run(run_id)  # the resumer reads it suspended, gate past its deadline
    [entry] = h.sweep().entries  # then the sweep settles the timeout first
    assert entry.action == "timed-out"
    racing = Harness(h.build, FirstReadStale(h.store, before), h.clock)
    with pytest.raises(SignalRefusedError) as caught:
        racing.resume(run_id, "approved", {"by": "qa"})
    assert f"came after gate 'approve''s deadline ({iso(deadline)})" in str(caught.value)
    assert "approved" not in h.record(run_id).signals and calls == []


def test_a_signal_after_a_settled_timeout_is_refused_naming_the_timeout() -> None:
    h, _calls, run_id, deadline = parked()
    h.clock.advance(HOUR + 1)
    h.sweep()
    with pytest.raises(SignalRefusedError) as caught:
        h.resume(run_id, "approved", {"by": "qa"})
    message = str(caught.value)
    assert f"gate 'approve' timed out at {iso(deadline)}" in message
    assert "came too late and was not delivered" in message
    assert "approved" not in h.record(run_id).signals


def test_a_signal_received_before_the_deadline_wins_even_when_the_sweep_comes_later() -> None:
    """The resumer stored the signal, then died before running anything: the sweep that
    reaps it after the deadline resumes it, because the signal came first."""
    h, calls, run_id, _deadline = parked()
    lease = h.store.acquire_lock(f"zuke-run-{run_id}", LockHolder("qa", run_id, "x"), 1_000)
    assert isinstance(lease, LockAcquired)
    h.clock.advance(HOUR - 1)
    got = Signal(data={"by": "qa"}, received_at=iso(h.clock.now_ms()), id="s1")
    update_run(
        h.store,
        run_id,
        lambda r: RunDelta(updated_at=r.updated_at, status="running", signals={"approved": got}),
    )
    h.clock.advance(2 * HOUR)  # past the gate's deadline and the lease's TTL
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [
        ("reaped", "suspended"),
        ("resumed", "succeeded"),
    ]
    assert calls == [("promote", got, "api")]


def test_the_gates_deadline_is_kept_when_the_run_suspends_there_again() -> None:
    h, _, run_id, deadline = parked()
    h.clock.advance(HOUR // 2)
    outcome: ResumeOutcome = h.resume(run_id)
    assert outcome.status == "suspended"
    waiting = h.record(run_id).targets["approve"].waiting_for
    assert waiting is not None and waiting.deadline == iso(deadline)


def test_a_gate_without_a_timeout_never_times_out() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    h = Harness(release_build(store, [], gate=approval(timeout=None)), store, clock)
    run_id = h.start().run_id
    clock.advance(10_000 * HOUR)
    [entry] = h.sweep().entries
    assert entry.action == "still-waiting"
    assert h.resume(run_id, "approved").status == "succeeded"


def test_a_rollback_timeout_runs_the_rollback_then_the_compensations() -> None:
    def deploy(self: Any, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            ctx.state.set({"at": "sit-api"})

        return t.executes(body).on_cancel(self.undo)

    calls_box: list[Any] = []

    def undo(self: Any, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: calls_box.append(("undo", ctx.state.get())))

    h, calls, run_id, _ = parked("rollback", extra={"deploy": target(deploy), "undo": target(undo)})
    h.clock.advance(HOUR + 1)
    assert by_sweep(h, run_id) == ("timed-out", "cancelled")
    assert calls == [("rollback", {"at": "sit-api"})]
    assert calls_box == [("undo", {"at": "sit-api"})]  # ctx.state: the original's meta
    assert h.record(run_id).status == "cancelled" and h.store.list_locks() == []


def test_a_rollback_left_unfinished_by_a_dead_sweep_ends_with_the_runs_compensations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the simulation (seed 1754 at 4bbc214): a sweep that died mid-rollback left
    the run running towards ``cancelled``; the sweep that finished it walked only the
    rollback's plan, so the run's own compensations (``undo``) never ran."""

    def deploy(self: Any, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            ctx.state.set({"at": "sit-api"})

        return t.executes(body).on_cancel(self.undo)

    undone: list[Any] = []

    def undo(self: Any, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: undone.append(ctx.state.get()))

    h, calls, run_id, _ = parked("rollback", extra={"deploy": target(deploy), "undo": target(undo)})
    h.clock.advance(HOUR + 1)

    class Died(BaseException):
        pass

    async def dies(*args: Any, **kwargs: Any) -> Any:
        raise Died  # the sweep's process dies as the rollback starts

    monkeypatch.setattr(timeouts, "execute_resumed", dies)
    with pytest.raises(Died):
        h.sweep()
    monkeypatch.undo()
    record = h.record(run_id)
    assert (record.status, record.intended_terminal) == ("running", "cancelled")
    h.clock.advance(2 * HOUR)  # its lease lapsed
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [
        ("reaped", "suspended"),
        ("resumed", "cancelled"),
    ]
    assert calls == [("rollback", {"at": "sit-api"})] and undone == [{"at": "sit-api"}]
