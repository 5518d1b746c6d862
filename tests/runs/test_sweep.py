"""``resume_check``: re-checking suspended runs from the record, intervals, foreign runs, counts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.runs.support import Harness, RecordingStore, approval, release_build
from zuke import (
    CorruptRecordError,
    NotYet,
    RunNotFoundError,
    WaitContext,
    WaitFailed,
    WaitTrigger,
    resume_when,
)
from zuke._clock import ManualClock
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta
from zuke.state.update import update_run
from zuke.state.wire import dumps_record


class Flag:
    """A predicate whose answer the test sets, counting how often it is asked."""

    def __init__(self) -> None:
        self.value = False
        self.asked = 0
        self.error: Exception | None = None

    def __call__(self) -> bool:
        self.asked += 1
        if self.error is not None:
            raise self.error
        return self.value


def predicate_run(interval: str | None = None) -> tuple[Harness, Flag, list[Any], str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    flag = Flag()
    calls: list[Any] = []
    gate = approval(resume_when(flag, interval=interval), timeout=None)
    h = Harness(release_build(store, calls, gate=gate), store, clock)
    run_id = h.start().run_id
    calls.clear()
    return h, flag, calls, run_id


def test_a_satisfied_predicate_is_resumed_by_the_sweep() -> None:
    h, flag, calls, run_id = predicate_run()
    [entry] = h.sweep().entries
    assert (entry.action, entry.result, entry.gate) == ("still-waiting", "suspended", "approve")
    flag.value = True
    report = h.sweep()
    [entry] = report.entries
    assert (entry.action, entry.result, entry.gate) == ("resumed", "succeeded", "approve")
    assert calls == [("promote", None, "api")]
    assert report.ok and report.counts()["resumed"] == 1
    assert h.record(run_id).status == "succeeded"


def test_a_predicates_interval_is_the_least_time_between_two_evaluations() -> None:
    h, flag, _, _run_id = predicate_run(interval="10m")
    assert flag.asked == 1  # when the gate was reached
    h.clock.advance(5 * 60_000)
    [entry] = h.sweep().entries
    assert entry.action == "still-waiting" and flag.asked == 1  # not due: not asked
    h.clock.advance(5 * 60_000)
    h.sweep()
    assert flag.asked == 2
    h.clock.advance(60_000)
    h.sweep()
    assert flag.asked == 2  # measured from the last evaluation, not the first
    h.clock.advance(9 * 60_000)
    flag.value = True
    assert h.sweep().entries[0].action == "resumed" and flag.asked == 3


def test_a_predicate_without_an_interval_is_asked_on_every_sweep() -> None:
    h, flag, _, _ = predicate_run()
    h.sweep()
    h.sweep()
    assert flag.asked == 3


def test_a_sweep_with_nothing_due_writes_nothing_for_a_signal_gate() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    h = Harness(release_build(store, []), store, clock)
    run_id = h.start().run_id
    before = store.get_run(run_id)
    recording = RecordingStore(store)
    for _ in range(2):
        [entry] = Harness(h.build, recording, clock).sweep().entries
        assert entry.action == "still-waiting"
    assert recording.calls == []  # no write, no lease
    assert store.get_run(run_id) == before


def test_a_raising_predicate_is_shown_and_counted_and_the_gate_stays_waiting() -> None:
    h, flag, _, run_id = predicate_run()
    flag.error = ConnectionError("status page down for token-value-123")
    h.env["TOKEN"] = "token-value-123"
    report = h.sweep()
    [entry] = report.entries
    assert (entry.action, entry.errored) == ("still-waiting", True)
    assert entry.detail is not None and "ConnectionError: status page down" in entry.detail
    assert "token-value-123" not in entry.detail
    assert report.counts()["errors"] == 1 and report.ok
    waiting = h.record(run_id).targets["approve"].waiting_for
    assert waiting is not None and waiting.detail == entry.detail
    assert h.record(run_id).status == "suspended"


class FailLater(WaitTrigger):
    def __init__(self) -> None:
        self.fail = False

    @property
    def descriptor(self) -> str:
        return "fail-later"

    def check(self, ctx: WaitContext) -> NotYet | WaitFailed:
        return WaitFailed("the workflow was cancelled") if self.fail else NotYet()


def test_a_trigger_that_fails_in_a_sweep_fails_the_run_and_the_sweep() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    trigger = FailLater()
    h = Harness(release_build(store, [], gate=approval(trigger)), store, clock)
    run_id = h.start().run_id
    trigger.fail = True
    report = h.sweep()
    [entry] = report.entries
    assert (entry.action, entry.result, entry.detail) == (
        "gate-failed", "failed", "the workflow was cancelled",
    )  # fmt: skip
    assert not report.ok and report.counts()["failed"] == 1
    record = h.record(run_id)
    assert record.status == "failed"
    assert record.targets["approve"].error == "the workflow was cancelled"
    assert record.targets["promote"].status == "skipped"
    assert store.list_locks() == []


def test_a_run_of_another_build_origin_is_skipped_as_foreign() -> None:
    h, flag, _, run_id = predicate_run()
    mine = release_build(h.store, [], gate=approval(resume_when(flag), timeout=None))
    h2 = Harness(mine, h.store, h.clock, env={"ZUKE_BUILD_ID": "acme/app"})
    run2 = h2.start().run_id
    flag.value = True
    foreign = Harness(h.build, h.store, h.clock, env={"ZUKE_BUILD_ID": "acme/other"})
    report = foreign.sweep()
    actions = {e.run_id: e.action for e in report.entries}
    assert actions == {run_id: "resumed", run2: "skipped-foreign"}  # no origin: not foreign
    assert h.record(run2).status == "suspended"
    assert report.counts()["skipped"] == 1


def test_a_run_of_another_build_class_is_not_touched() -> None:
    h, flag, _, run_id = predicate_run()
    flag.value = True
    other = release_build(h.store, [], name="Other")
    assert Harness(other, h.store, h.clock).sweep().entries == []
    [entry] = Harness(other, h.store, h.clock).sweep(run_id).entries
    assert entry.action == "skipped-foreign" and entry.build == "Release"
    assert h.record(run_id).status == "suspended"


def test_a_sweep_of_one_run_checks_only_that_run() -> None:
    h, flag, _, run_id = predicate_run()
    other = h.start().run_id
    flag.value = True
    report = h.sweep(run_id)
    assert [(e.run_id, e.action) for e in report.entries] == [(run_id, "resumed")]
    assert h.record(other).status == "suspended"


def test_a_sweep_of_an_unknown_run_is_refused() -> None:
    h, _, _, _ = predicate_run()
    with pytest.raises(RunNotFoundError, match='no run "nope"'):
        h.sweep("nope")


def test_a_second_sweep_is_a_no_op() -> None:
    h, flag, calls, run_id = predicate_run()
    flag.value = True
    assert h.sweep().entries[0].action == "resumed"
    before = h.store.get_run(run_id)
    assert h.sweep().entries == []
    assert h.store.get_run(run_id) == before and len(calls) == 1


def test_the_sweep_fails_for_a_degraded_run_and_goes_on_with_the_others() -> None:
    h, flag, _, run_id = predicate_run()
    healthy = h.start().run_id
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at, degraded=True))
    flag.value = True
    report = h.sweep()
    by_id = {e.run_id: e for e in report.entries}
    assert by_id[run_id].action == "failed" and "--resume-degraded" in (by_id[run_id].detail or "")
    assert by_id[healthy].action == "resumed"
    assert not report.ok and report.counts()["failed"] == 1
    assert h.sweep(run_id, resume_degraded=True).entries[0].action == "resumed"


def test_counts_add_up() -> None:
    h, _flag, _, _ = predicate_run()
    h.start()
    counts = h.sweep().counts()
    assert counts == {
        "checked": 2, "resumed": 0, "still_waiting": 2, "timed_out": 0, "gate_failed": 0,
        "deferred": 0,
        "failed": 0, "reaped": 0, "skipped": 0, "errors": 0, "not_checked": 0,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("good", "bad"),
    [
        ('"waitingFor":{"trigger":"predicate"', '"waitingFor":{"trigger":4242424242'),
        ('"waitingFor":{', '"effects":"not-a-map","waitingFor":{'),
    ],
    ids=["waitingFor", "effects"],
)
def test_a_corrupt_gate_row_is_one_failed_entry_and_the_sweep_goes_on(
    tmp_path: Path, good: str, bad: str
) -> None:
    clock = ManualClock()
    store = FileSystemStateStore(tmp_path, clock=clock)
    flag = Flag()
    gate = approval(resume_when(flag), timeout=None)
    h = Harness(release_build(store, [], gate=gate), store, clock)
    broken, healthy = h.start().run_id, h.start().run_id
    path = Path(store.path_of(broken))
    text = path.read_text()
    assert good in text
    path.write_text(text.replace(good, bad, 1))
    flag.value = True
    report = h.sweep()
    by_id = {e.run_id: e for e in report.entries}
    assert by_id[healthy].action == "resumed"
    entry = by_id[broken]
    assert entry.action == "failed" and entry.detail is not None
    assert entry.detail.startswith("state: ") and "\n" not in entry.detail
    assert not report.ok
    assert path.read_text() == text.replace(good, bad, 1)  # nothing written over it
    with pytest.raises(CorruptRecordError):
        h.resume(broken)


class MeetsAnotherSweep(RecordingStore):
    """Runs a whole second sweep the moment the first one has taken a run's lease."""

    def __init__(self, inner: Any, second: Any) -> None:
        super().__init__(inner)
        self.second = second
        self.report: Any = None

    def acquire_lock(self, key: str, *args: Any, **kwargs: Any) -> Any:
        taken = super().acquire_lock(key, *args, **kwargs)
        if key.startswith("zuke-run-") and self.report is None:
            with ThreadPoolExecutor(1) as pool:  # its own thread and loop, as a process would
                self.report = pool.submit(self.second).result()
        return taken


def test_two_sweeps_at_once_resume_a_run_exactly_once() -> None:
    h, flag, calls, _ = predicate_run()
    flag.value = True
    meeting = MeetsAnotherSweep(h.store, lambda: h.sweep())
    report = Harness(h.build, meeting, h.clock).sweep()
    assert [(e.action, e.result) for e in report.entries] == [("resumed", "succeeded")]
    assert [(e.action, e.result) for e in meeting.report.entries] == [("skipped-held", "suspended")]
    assert calls == [("promote", None, "api")]


class Says(WaitTrigger):
    """Answers what it is told: reasons that quote the run's secret."""

    def __init__(self) -> None:
        self.answer: NotYet | WaitFailed = NotYet("polling with s3cret-token-value")

    @property
    def descriptor(self) -> str:
        return "says"

    def check(self, ctx: WaitContext) -> NotYet | WaitFailed:
        return self.answer


def test_a_triggers_reasons_never_put_a_secret_into_the_record() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    trigger = Says()
    h = Harness(release_build(store, [], gate=approval(trigger)), store, clock)
    h.env["TOKEN"] = "s3cret-token-value"
    run_id = h.start().run_id
    assert "s3cret-token-value" not in dumps_record(h.record(run_id))
    trigger.answer = NotYet("still polling with s3cret-token-value")
    [entry] = h.sweep().entries
    assert "s3cret-token-value" not in (entry.detail or "x")
    assert "s3cret-token-value" not in dumps_record(h.record(run_id))
    trigger.answer = WaitFailed("refused for s3cret-token-value")
    [entry] = h.sweep().entries
    assert entry.action == "gate-failed" and "s3cret-token-value" not in (entry.detail or "x")
    record = h.record(run_id)
    assert record.status == "failed" and "s3cret-token-value" not in dumps_record(record)


class Keeps(WaitTrigger):
    """Keeps state in the sweep: a secret, then a value that is not JSON."""

    def __init__(self) -> None:
        self.value: Any = None

    @property
    def descriptor(self) -> str:
        return "keeps"

    async def check(self, ctx: WaitContext) -> NotYet:
        if self.value is not None:
            ctx.state.set({"kept": self.value})
            await ctx.persist()
        return NotYet()


def test_state_a_trigger_keeps_in_a_sweep_is_redacted_and_must_be_json() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    trigger = Keeps()
    h = Harness(release_build(store, [], gate=approval(trigger)), store, clock)
    h.env["TOKEN"] = "s3cret-token-value"
    run_id = h.start().run_id
    trigger.value = "auth s3cret-token-value"
    h.sweep()
    kept = h.record(run_id).targets["approve"].meta["kept"]
    assert "s3cret-token-value" not in kept and kept.startswith("auth ")
    trigger.value = {1, 2}
    [entry] = h.sweep().entries
    assert entry.errored and "JSON-serialisable" in (entry.detail or "")
    assert h.record(run_id).targets["approve"].meta["kept"] == kept
