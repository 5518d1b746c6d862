"""A sweep on a store whose writes are rationed: what the budget does not afford is deferred
(left suspended, untouched, not failed) and the next sweep takes it up."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import Harness, approval, release_build
from zuke import resume_when
from zuke._clock import ManualClock
from zuke._engine import writer as writer_module
from zuke._engine.store_traits import (
    RESUME_WRITES,
    STAMP_HEADROOM,
    reserve_writes,
    resume_writes,
)
from zuke._errors import StoreUnavailableError
from zuke._waits import NotYet, WaitContext, WaitResult, WaitTrigger
from zuke.cli.sweep_output import sweep_text
from zuke.state.memory import MemoryStateStore

_WRITES = ("create_run", "put_run", "append_run", "acquire_lock", "renew_lock", "release_lock")


class BudgetStore:
    """A memory store with a write budget (``reserve_writes``), counting what is written."""

    def __init__(self, inner: MemoryStateStore, budget: int | None = None) -> None:
        self.inner = inner
        self.budget = budget  # None: unlimited
        self.written = 0
        self.asked: list[int] = []
        self.fail_writes_after: int | None = None  # a rate limit striking mid-resume

    def reserve_writes(self, writes: int) -> bool:
        self.asked.append(writes)
        return self.budget is None or self.written + writes <= self.budget

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.inner, name)
        if name not in _WRITES:
            return found

        def write(*args: Any, **kwargs: Any) -> Any:
            if self.fail_writes_after is not None and self.written >= self.fail_writes_after:
                raise StoreUnavailableError("state: GitHub's write limit: retry after 12:00 UTC")
            self.written += 1
            return found(*args, **kwargs)

        return write


class Approved:
    value = False

    def __call__(self) -> bool:
        return self.value


def releases(
    count: int, interval: str | None = None
) -> tuple[Harness, BudgetStore, Approved, list[str]]:
    """``count`` runs suspended at ``approve`` (a predicate gate), on a store without a budget
    yet (the runs' own writes are not the sweep's)."""
    clock = ManualClock()
    store = BudgetStore(MemoryStateStore(clock=clock))
    approved = Approved()
    gate = approval(resume_when(approved, interval=interval), timeout="1h")
    h = Harness(release_build(store, [], gate=gate), store, clock)
    ids = [h.start().run_id for _ in range(count)]
    store.written = 0
    return h, store, approved, ids


def test_what_the_budget_does_not_afford_is_deferred_untouched_and_the_next_sweep_resumes_it() -> (
    None
):
    h, store, approved, ids = releases(3)
    approved.value = True
    needed = resume_writes(_specs(h), h.record(ids[0]), {"approve"})
    store.budget = needed + 1  # one resume, not two
    versions = {i: h.store.get_run(i).version for i in ids}  # type: ignore[union-attr]
    report = h.sweep()
    actions = [e.action for e in report.entries]
    assert actions == ["resumed", "deferred", "deferred"]
    assert report.ok and report.failed == 0
    assert report.counts()["deferred"] == 2 and report.counts()["resumed"] == 1
    resumed, *later = [e.run_id for e in report.entries]
    assert sorted([resumed, *later]) == sorted(ids)
    assert h.record(resumed).status == "succeeded"
    for run_id in later:  # decided before anything was written: no lease, no write
        assert h.store.get_run(run_id).version == versions[run_id]  # type: ignore[union-attr]
        assert h.record(run_id).status == "suspended"
        assert h.record(run_id).targets["approve"].status == "waiting"
    deferred = report.entries[1]
    assert deferred.result == "suspended" and deferred.gate == "approve"
    assert deferred.detail is not None and "left suspended for the next sweep" in deferred.detail
    store.budget, store.written = None, 0  # the next hour
    again = h.sweep()
    assert [e.action for e in again.entries] == ["resumed", "resumed"]
    assert all(h.record(i).status == "succeeded" for i in ids)


def _specs(h: Harness) -> Any:
    from zuke.runs.lifecycle import load_for

    return load_for(h.build, h.record(h.store.list_runs()[0].id), h.options()).graph.specs


def test_the_estimate_counts_the_base_and_each_pending_gate_lock_and_effect() -> None:
    h, _store, _approved, ids = releases(1)
    specs = _specs(h)
    record = h.record(ids[0])
    # approve (a gate, still waiting): 2; deploy and lint are done; promote and release: 0
    assert resume_writes(specs, record) == RESUME_WRITES + 2
    assert resume_writes(specs, record, {"approve"}) == RESUME_WRITES  # passed by this resume


def test_a_store_without_the_trait_always_affords() -> None:
    assert reserve_writes(MemoryStateStore(), 10_000)


def test_a_timed_out_gate_out_of_budget_is_deferred_not_settled() -> None:
    h, store, _approved, ids = releases(1)
    h.clock.advance(2 * 3_600_000)  # past the gate's 1h timeout
    store.budget = 0
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("deferred", "suspended")
    assert h.record(ids[0]).status == "suspended" and store.written == 0
    store.budget = None
    [entry] = h.sweep().entries
    assert entry.action == "timed-out"


def test_a_still_waiting_run_out_of_budget_is_not_stamped() -> None:
    h, store, _approved, ids = releases(1, interval="1m")
    h.clock.advance(120_000)  # the check is due, and worth stamping (an interval)
    store.budget = STAMP_HEADROOM  # enough for resumes, which the headroom is kept for
    [entry] = h.sweep().entries
    assert entry.action == "still-waiting" and store.written == 0
    store.budget = None
    h.clock.advance(120_000)
    h.sweep()
    assert store.written > 0  # with budget, the check is stamped
    assert h.record(ids[0]).targets["approve"].waiting_for.checked_at is not None  # type: ignore[union-attr]


def test_a_rate_limit_striking_mid_resume_fails_loudly_and_loses_no_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget said yes, then the store refused a write mid-resume (GitHub's limit, a
    wrong estimate): the existing record-failure paths hold — reported failed, the run kept,
    and a later sweep finishes it."""
    monkeypatch.setattr(writer_module, "BACKOFF_S", (0.0, 0.0, 0.0))  # its count, not its time
    h, store, approved, ids = releases(1)
    approved.value = True
    store.fail_writes_after = 2  # the lease and `running` land; the rest is refused
    report = h.sweep()
    [entry] = report.entries
    assert entry.action == "failed" and not report.ok
    assert entry.detail
    assert h.store.get_run(ids[0]) is not None  # never silently lost
    store.fail_writes_after = None
    h.clock.advance(11 * 60_000)  # the dead resumer's lease lapses
    h.sweep()
    assert h.record(ids[0]).status == "succeeded"


def test_the_sweep_line_counts_deferred_runs_and_they_do_not_turn_it_red() -> None:
    h, store, approved, _ids = releases(2)
    approved.value = True
    store.budget = 0
    report = h.sweep()
    text = sweep_text(report)
    assert text.splitlines()[-1].startswith(
        "Checked 2 suspended run(s): 0 resumed, 0 still waiting, 0 timed out, 0 gate(s) failed, "
        "2 deferred, 0 failed;"
    )
    assert report.ok and report.as_json()["counts"]["deferred"] == 2
    assert {r["action"] for r in report.as_json()["runs"]} == {"deferred"}


def test_reserving_is_asked_with_the_estimate_before_each_resume() -> None:
    h, store, approved, ids = releases(2)
    approved.value = True
    store.budget = 1_000
    estimate = resume_writes(_specs(h), h.record(ids[0]), {"approve"})
    h.sweep()
    assert store.asked.count(estimate) == 2  # once per run, before its resume
    assert all(h.record(i).status == "succeeded" for i in ids)


class Phases(WaitTrigger):
    """A remote job seen queued, then in progress: only the reason changes, no state kept."""

    def __init__(self) -> None:
        self.reason = "queued"

    @property
    def descriptor(self) -> str:
        return "phases"

    def check(self, ctx: WaitContext) -> WaitResult:
        return NotYet(self.reason)


@pytest.mark.parametrize("checkpointed", [True, False])
def test_a_changed_reason_alone_is_not_written_on_a_checkpointed_store(checkpointed: bool) -> None:
    clock = ManualClock()
    store = BudgetStore(MemoryStateStore(clock=clock))
    store.checkpointed = checkpointed  # type: ignore[attr-defined]
    phases = Phases()
    h = Harness(release_build(store, [], gate=approval(phases, timeout="1h")), store, clock)
    run_id = h.start().run_id
    h.sweep()
    store.written = 0
    phases.reason = "in progress"
    [entry] = h.sweep().entries
    assert entry.action == "still-waiting" and entry.detail == "in progress"  # still shown
    waiting = h.record(run_id).targets["approve"].waiting_for
    assert waiting is not None
    if checkpointed:  # each write a commit: the new reason is shown, not recorded
        assert store.written == 0 and waiting.detail != "in progress"
    else:
        assert store.written > 0 and waiting.detail == "in progress"
