"""``.on_failure(...)``: what a gate whose trigger fails does — in a sweep, in the process
that reached the gate, and on a later hold — with the reason on the gate's row."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from tests.runs.support import Harness, release_build
from zuke import Build, BuildDefinitionError, NotYet, WaitContext, WaitFailed, WaitTrigger, target
from zuke._clock import ManualClock
from zuke._engine.run import load
from zuke._target import TargetBuilder
from zuke._waits import WaitSettings, freeze_wait
from zuke.runs.continuation import continue_due
from zuke.runs.timeouts import unfinished_rollback
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunEvent, WaitingFor
from zuke.state.wire import loads_record, record_to_json

REASON = "denied by @bob (maintain): not this week"


class FailLater(WaitTrigger):
    """Not yet, until the test says the wait failed; counts how often it is asked."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.asked = 0

    @property
    def descriptor(self) -> str:
        return "fail-later"

    def check(self, ctx: WaitContext) -> NotYet | WaitFailed:
        self.asked += 1
        return WaitFailed(REASON) if self.fail else NotYet()


def gate(trigger: WaitTrigger, on_failure: str | None) -> Callable[[Build, WaitSettings], Any]:
    def configure(build: Build, s: WaitSettings) -> Any:
        s = s.on(trigger).timeout("72h")
        if on_failure == "rollback":
            return s.on_failure(build.rollback)  # type: ignore[attr-defined]
        return s if on_failure is None else s.on_failure(on_failure)  # type: ignore[arg-type]

    return configure


def harness(trigger: WaitTrigger, on_failure: str | None, calls: list[Any]) -> Harness:
    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: calls.append("deploy")).on_cancel(self.undo)  # type: ignore[attr-defined]

    def undo(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: calls.append("undo"))

    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    build = release_build(store, calls, gate=gate(trigger, on_failure),
                          extra={"deploy": target(deploy), "undo": target(undo)})  # fmt: skip
    return Harness(build, store, clock)


def rollbacks(calls: list[Any]) -> int:
    return sum(isinstance(c, tuple) and c[0] == "rollback" for c in calls)


def test_on_failure_takes_the_forms_of_on_timeout_and_refuses_anything_else() -> None:
    assert freeze_wait("g", lambda s: s.on(FailLater())).on_failure == "fail"
    spec = freeze_wait("g", lambda s: s.on(FailLater()).on_failure("cancel-run"))
    assert (spec.on_failure, spec.on_failure_is_target) == ("cancel-run", False)
    with pytest.raises(BuildDefinitionError, match=r'on_failure\(\) takes "fail", "cancel-run"'):
        freeze_wait("g", lambda s: s.on(FailLater()).on_failure("rollback"))  # type: ignore[arg-type]


def test_a_failure_in_a_sweep_runs_the_rollback_and_records_why() -> None:
    calls: list[Any] = []
    trigger = FailLater()
    h = harness(trigger, "rollback", calls)
    run_id = h.start().run_id
    trigger.fail = True
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("gate-failed", "cancelled")
    assert REASON in (entry.detail or "") and "ran rollback" in (entry.detail or "")
    assert rollbacks(calls) == 1 and not any(isinstance(c, tuple) and c[0] == "promote"
                                             for c in calls)  # fmt: skip
    record = h.record(run_id)
    assert record.status == "cancelled"
    assert record.targets["approve"].status == "failed"
    assert record.targets["approve"].error == REASON
    assert record.targets["rollback"].status == "succeeded"
    assert [e.args.get("onFailure") for e in record.events if e.tool == "wait-failed"] == [
        "rollback"
    ]
    assert h.sweep().entries == []  # settled once: nothing left to sweep


def test_a_failure_in_a_sweep_with_cancel_run_walks_the_compensations() -> None:
    calls: list[Any] = []
    trigger = FailLater()
    h = harness(trigger, "cancel-run", calls)
    run_id = h.start().run_id
    trigger.fail = True
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("gate-failed", "cancelled")
    assert "undo" in calls and rollbacks(calls) == 0
    record = h.record(run_id)
    assert record.status == "cancelled" and record.targets["approve"].error == REASON


def test_the_default_still_fails_the_run_without_a_rollback() -> None:
    calls: list[Any] = []
    trigger = FailLater()
    h = harness(trigger, None, calls)
    run_id = h.start().run_id
    trigger.fail = True
    [entry] = h.sweep().entries
    assert (entry.action, entry.result, entry.detail) == ("gate-failed", "failed", REASON)
    assert rollbacks(calls) == 0 and "undo" not in calls
    assert h.record(run_id).targets["approve"].error == REASON


def test_in_process_cancel_run_cancels_the_run_where_the_gate_failed() -> None:
    calls: list[Any] = []
    h = harness(FailLater(fail=True), "cancel-run", calls)
    result = h.start()
    assert result.status == "cancelled"
    assert "undo" in calls
    record = h.record(result.run_id)
    assert record.targets["approve"].status == "failed"
    assert REASON in (record.targets["approve"].error or "")


def test_in_process_a_rollback_disposition_is_handed_over_and_settled_once() -> None:
    calls: list[Any] = []
    trigger = FailLater(fail=True)
    h = harness(trigger, "rollback", calls)
    result = h.start()
    # The process that reached the gate parks it with the failure recorded ...
    assert result.status == "suspended"
    waiting = h.record(result.run_id).targets["approve"].waiting_for
    assert waiting is not None and waiting.failed == REASON
    asked = trigger.asked
    # ... and continues it at once, as the CLI does: the rollback runs, the trigger is not
    # asked again.
    outcome = asyncio.run(continue_due(h.build, h.store, result.run_id, h.options(),
                                       actor="ci"))  # fmt: skip
    assert outcome is not None and (outcome.action, outcome.status) == ("gate-failed", "cancelled")
    assert rollbacks(calls) == 1 and trigger.asked == asked
    assert h.record(result.run_id).targets["approve"].error == REASON
    assert h.sweep().entries == []


def test_a_handed_over_failure_is_settled_by_the_next_sweep_without_asking_again() -> None:
    calls: list[Any] = []
    trigger = FailLater(fail=True)
    h = harness(trigger, "rollback", calls)
    run_id = h.start().run_id
    asked = trigger.asked
    trigger.fail = False  # the trigger would say otherwise now: the recorded failure stands
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("gate-failed", "cancelled")
    assert rollbacks(calls) == 1 and trigger.asked == asked
    assert h.record(run_id).status == "cancelled"


def test_a_rollback_begun_for_a_failed_gate_is_what_a_later_process_finishes() -> None:
    calls: list[Any] = []
    h = harness(FailLater(), "rollback", calls)
    run_id = h.start().run_id
    record = h.record(run_id)
    event = RunEvent(at=record.updated_at, tool="wait-failed", actor="ci",
                     args={"gate": "approve", "onFailure": "rollback"})  # fmt: skip
    targets = {**record.targets, "rollback": record.targets["deploy"]}
    dying = replace(record, intended_terminal="cancelled", events=(*record.events, event),
                    targets=targets)  # fmt: skip
    loaded = load(h.build, {}, {}, lenient=True)
    plan = asyncio.run(unfinished_rollback(loaded, dying))
    assert plan is not None and plan.order == ("rollback",)


def test_a_recorded_failure_survives_the_records_json() -> None:
    calls: list[Any] = []
    h = harness(FailLater(fail=True), "rollback", calls)
    record = h.record(h.start().run_id)
    waiting = record.targets["approve"].waiting_for
    assert isinstance(waiting, WaitingFor) and waiting.failed == REASON
    raw = record_to_json(record)
    assert raw["targets"]["approve"]["waitingFor"]["failed"] == REASON
    again = loads_record(json.dumps(raw))
    assert again.targets["approve"].waiting_for == waiting


def test_a_continuation_whose_run_another_process_already_ended_is_nothing_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Postgres chaos (issue 25 §8): a starter saw its run due, and before it took the lease
    the watcher resumed the run and took it to its end. The continuation said nothing was
    left to do — it raised "not suspended" and the starter failed instead."""
    import zuke.runs.continuation as continuation
    from zuke.state.records import RunDelta
    from zuke.state.update import update_run

    calls: list[Any] = []
    h = harness(FailLater(), "rollback", calls)
    run_id = h.start().run_id
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="succeeded"))

    async def seen_due(store: Any, run_id: str) -> bool:
        return True  # what the starter read an instant before the watcher ended the run

    monkeypatch.setattr(continuation, "is_due", seen_due)
    outcome = asyncio.run(continue_due(h.build, h.store, run_id, h.options(), actor="ci"))
    assert outcome is None
    assert h.record(run_id).status == "succeeded"
