"""A sweep offers every listed run's waiting gates to their triggers' ``prefetch`` together,
once, before any check (``WaitTrigger.batch_key`` groups them); a prefetch reads only, and one
that raises is reported and changes nothing. A trigger that meets a refused credential
(``TriggerAccessError``) fails the sweep for its run, which stays waiting as it was."""

from __future__ import annotations

import io
from collections.abc import Hashable, Sequence
from typing import Any

import pytest

from tests.runs.support import Harness, approval, release_build
from zuke import NotYet, WaitContext, WaitTrigger
from zuke._clock import ManualClock
from zuke._errors import RunError, TriggerAccessError
from zuke.cli.sweep_output import access_failures
from zuke.state.memory import MemoryStateStore

SECRET = "s3cret-value-0042"


class Batched(WaitTrigger):
    """Memoises in ``ctx.shared`` what its prefetch saw; its checks report whether they found
    the memo."""

    def __init__(self, key: Hashable | None = "k", fail: BaseException | None = None) -> None:
        self.key, self.fail = key, fail
        self.prefetched: list[list[tuple[str, str]]] = []
        self.checked: list[bool] = []
        self.refuse_checks = False

    @property
    def descriptor(self) -> str:
        return "batched"

    def batch_key(self) -> Hashable | None:
        return self.key

    async def prefetch(self, gates: Sequence[WaitContext]) -> None:
        self.prefetched.append([(g.run_id, g.target) for g in gates])
        for g in gates:
            g.shared[f"memo {g.run_id}"] = True
        if self.fail is not None:
            raise self.fail

    def check(self, ctx: WaitContext) -> Any:
        if self.refuse_checks:
            raise TriggerAccessError(f"the service refused TOKEN_VAR for {ctx.run_id}")
        self.checked.append(bool(ctx.shared.get(f"memo {ctx.run_id}")))
        return NotYet("waiting")


def suspended(trigger: WaitTrigger, runs: int = 3) -> tuple[Harness, list[str]]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    build = release_build(store, [], gate=approval(trigger))
    # a secret is never recorded: each process has it from its environment
    h = Harness(build, store, clock, env={"ZUKE_ACTOR": "alice", "TOKEN": SECRET})
    ids = [h.start().run_id for _ in range(runs)]
    return h, ids


def test_every_waiting_gate_is_offered_once_before_the_checks_which_read_the_memo() -> None:
    trigger = Batched()
    h, ids = suspended(trigger)
    trigger.checked.clear()
    report = h.sweep()
    assert [sorted(batch) for batch in trigger.prefetched] == [sorted((i, "approve") for i in ids)]
    assert trigger.checked == [True, True, True]
    assert [e.action for e in report.entries] == ["still-waiting"] * 3 and report.ok


def test_a_trigger_without_a_batch_key_is_never_offered() -> None:
    trigger = Batched(key=None)
    h, _ = suspended(trigger, runs=2)
    h.sweep()
    assert trigger.prefetched == []


def test_a_prefetch_that_raises_is_reported_redacted_and_each_gate_is_checked_as_usual() -> None:
    trigger = Batched(fail=ValueError(f"boom {SECRET}"))
    h, _ = suspended(trigger, runs=2)
    trigger.checked.clear()
    report = h.sweep()
    assert [e.action for e in report.entries] == ["still-waiting"] * 2 and report.ok
    assert len(trigger.checked) == 2
    (note,) = [w for w in h.warnings if "batched read" in w]
    assert note.startswith("zuke: gate checks: batched's batched read of 2 gate(s) raised "
                           "ValueError: boom [redacted]; each is checked on its own")  # fmt: skip
    assert SECRET not in note


def test_a_prefetch_reads_only() -> None:
    class Writer(Batched):
        async def prefetch(self, gates: Sequence[WaitContext]) -> None:
            for write in (lambda g: g.state.set({"x": 1}),):
                with pytest.raises(RunError, match="reads only"):
                    write(gates[0])
            with pytest.raises(RunError, match="reads only"):
                await gates[0].persist()
            self.prefetched.append([])

    trigger = Writer()
    h, ids = suspended(trigger, runs=1)
    before = h.record(ids[0]).targets["approve"].meta
    h.sweep()
    assert trigger.prefetched == [[]]
    assert h.record(ids[0]).targets["approve"].meta == before


def test_a_gate_inside_its_interval_is_not_offered() -> None:
    trigger = Batched()
    trigger.interval_ms = 600_000
    h, _ = suspended(trigger, runs=1)
    h.sweep()  # asked: stamped
    trigger.prefetched.clear()
    h.clock.advance(60_000)
    h.sweep()
    assert trigger.prefetched == []


def test_a_refused_credential_fails_the_sweep_for_the_run_and_leaves_it_waiting() -> None:
    trigger = Batched(fail=TriggerAccessError("refused in the batch"))
    h, ids = suspended(trigger, runs=2)
    before = [h.record(i) for i in ids]
    trigger.refuse_checks = True
    report = h.sweep()
    assert [(e.action, e.result, e.access_failed) for e in report.entries] == [
        ("failed", "suspended", True)] * 2  # fmt: skip
    assert not report.ok and report.failed == 2
    assert not [w for w in h.warnings if "batched read" in w]  # the checks report it, once
    assert [h.record(i) for i in ids] == before  # nothing written: left as it was
    first = report.entries[0].run_id
    assert report.entries[0].detail == f"the service refused TOKEN_VAR for {first}"
    err = io.StringIO()
    access_failures(report, err)
    (line,) = err.getvalue().splitlines()
    assert line.startswith(f"zuke: the sweep could not check run {first} (and 1 more run(s), "
                           "see above): the service refused TOKEN_VAR")  # fmt: skip
    assert line.endswith("; each is left waiting as it was")
    assert report.as_json()["ok"] is False


def test_a_run_that_moved_after_the_batched_read_is_not_resumed_on_its_old_record() -> None:
    # The sweep reads every record once, for the batched read, and checks each run from it:
    # a run another process moved meanwhile (here: finished while the first run was checked)
    # is refused where its check takes the lease, never resumed again.
    from dataclasses import replace

    from zuke import Satisfied

    class MovesTheOther(Batched):
        first: str | None = None
        armed = False  # not while the runs start (their first checks)

        def check(self, ctx: WaitContext) -> Any:
            if not self.armed:
                return NotYet("starting")
            if self.first is None:  # the first run checked: the other one finishes meanwhile
                self.first = ctx.run_id
                (other,) = [i for i in ids if i != ctx.run_id]
                found = h.store.get_run(other)
                assert found is not None
                moved = replace(found.record, status="succeeded")
                h.store.put_run(moved, expected_version=found.version)
                return NotYet("waiting")
            return Satisfied()

    trigger = MovesTheOther()
    h, ids = suspended(trigger, runs=2)
    trigger.armed = True
    calls = len(h.warnings)
    report = h.sweep()
    by_run = {e.run_id: (e.action, e.result) for e in report.entries}
    (other,) = [i for i in ids if i != trigger.first]
    assert by_run[trigger.first or ""] == ("still-waiting", "suspended")
    assert by_run[other] == ("skipped-held", "succeeded")
    assert h.record(other).status == "succeeded" and len(h.warnings) == calls
