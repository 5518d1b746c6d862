"""Past its deadline a gate is asked once more, as of the deadline: an answer given in time
passes it however late the sweep (or a resume) comes; a late one, or a trigger that cannot
say what happened by then, times it out."""

from __future__ import annotations

from typing import Any

from tests.runs.support import HOUR, Harness, approval, release_build
from zuke import NotYet, Satisfied, WaitContext, WaitFailed, WaitTrigger, resume_when
from zuke._clock import ManualClock, iso
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, Signal
from zuke.state.update import update_run


class Answer(WaitTrigger):
    """Satisfied (or failed) by what happened at ``at`` (epoch ms), counted as of the deadline."""

    answers_as_of = True

    def __init__(self) -> None:
        self.at: int | None = None
        self.fails = False
        self.raises = False
        self.seen: list[int | None] = []

    @property
    def descriptor(self) -> str:
        return "answer"

    def check(self, ctx: WaitContext) -> NotYet | Satisfied | WaitFailed:
        self.seen.append(ctx.as_of_ms)
        if self.raises:
            raise RuntimeError("GitHub is down")
        cut = ctx.now_ms if ctx.as_of_ms is None else ctx.as_of_ms
        if self.at is None or self.at > cut:
            return NotYet("no answer by then")
        return WaitFailed("denied in time") if self.fails else Satisfied()


def harness(trigger: WaitTrigger, calls: list[Any]) -> tuple[Harness, str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    gate = approval(trigger, timeout="1h", on_timeout="rollback")
    h = Harness(release_build(store, calls, gate=gate), store, clock)
    return h, h.start().run_id


def rolled_back(calls: list[Any]) -> bool:
    return any(isinstance(c, tuple) and c[0] == "rollback" for c in calls)


def promoted(calls: list[Any]) -> bool:
    return any(isinstance(c, tuple) and c[0] == "promote" for c in calls)


def test_an_answer_in_time_swept_late_resumes_the_run() -> None:
    calls: list[Any] = []
    trigger = Answer()
    h, _ = harness(trigger, calls)
    trigger.at = h.clock.now_ms() + HOUR // 2  # in time
    h.clock.advance(HOUR + 10 * 60_000)  # the sweep comes 10 minutes late
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("resumed", "succeeded")
    assert promoted(calls) and not rolled_back(calls)
    assert trigger.seen[-1] == trigger.at + HOUR // 2  # asked as of the deadline, not now


def test_an_answer_after_the_deadline_times_the_gate_out() -> None:
    calls: list[Any] = []
    trigger = Answer()
    h, _ = harness(trigger, calls)
    trigger.at = h.clock.now_ms() + HOUR + 60_000  # a minute late
    h.clock.advance(HOUR + 10 * 60_000)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    assert rolled_back(calls) and not promoted(calls)


def test_a_failure_given_in_time_takes_the_failure_disposition_not_the_timeout() -> None:
    calls: list[Any] = []
    trigger = Answer()
    h, run_id = harness(trigger, calls)
    trigger.at, trigger.fails = h.clock.now_ms() + 60_000, True
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result, entry.detail) == ("gate-failed", "failed", "denied in time")
    assert h.record(run_id).targets["approve"].error == "denied in time"


def test_a_final_check_that_raises_times_out_and_says_why() -> None:
    calls: list[Any] = []
    trigger = Answer()
    h, _ = harness(trigger, calls)
    trigger.raises = True
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    assert "its final check: the trigger raised RuntimeError: GitHub is down" in (
        entry.detail or ""
    )


def test_a_resume_after_the_deadline_also_asks_as_of_it() -> None:
    calls: list[Any] = []
    trigger = Answer()
    h, run_id = harness(trigger, calls)
    trigger.at = h.clock.now_ms() + 60_000
    h.clock.advance(2 * HOUR)
    outcome = h.resume(run_id)
    assert (outcome.action, outcome.status) == ("resumed", "succeeded")
    assert promoted(calls) and h.record(run_id).targets["approve"].status == "succeeded"


def test_a_trigger_that_cannot_answer_as_of_the_deadline_is_not_asked_past_it() -> None:
    calls: list[Any] = []
    asked: list[int] = []

    def check() -> bool:
        asked.append(1)
        return len(asked) > 1  # not at first reach; true on any later ask

    h, _ = harness(resume_when(check, interval="1m"), calls)
    before = len(asked)
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    assert len(asked) == before  # true now says nothing of the deadline: not asked


def test_a_signal_stored_after_the_deadline_does_not_pass_the_final_check() -> None:
    calls: list[Any] = []
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    gate = approval(timeout="1h", on_timeout="rollback")
    h = Harness(release_build(store, calls, gate=gate), store, clock)
    run_id = h.start().run_id
    h.clock.advance(2 * HOUR)
    late = Signal(data={}, received_at=iso(h.clock.now_ms()))  # an hour past the deadline
    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at,
                                                  signals={"approved": late}))  # fmt: skip
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    assert not promoted(calls)
