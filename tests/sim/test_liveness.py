"""The liveness invariants (tests.sim.liveness) on records made by hand, and the seeds that
found the bugs they caught (each fixed in zuke)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.sim.invariants import Invariants
from tests.sim.liveness import after_drain, before_drain, settled
from tests.sim.scenario import run_seed
from zuke._clock import ManualClock
from zuke.state._protocol import Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunEvent, RunRecord, Signal, TargetRecord, WaitingFor

pytestmark = pytest.mark.sim

_AT = "2024-01-01T00:00:00.000Z"


def _run(status: str, **rows: TargetRecord) -> RunRecord:
    return RunRecord(id="run-1", build="B", root_target="release", status=status,  # type: ignore[arg-type]
                     actor="a", created_at=_AT, updated_at=_AT, targets=rows)  # fmt: skip


def _waiting(signal: str, deadline: str | None = None) -> TargetRecord:
    return TargetRecord(status="waiting",
                        waiting_for=WaitingFor(f"signal:{signal}", deadline=deadline))  # fmt: skip


def _checked(record: RunRecord, *, drained: bool = True, faulted: bool = False) -> list[str]:
    store = MemoryStateStore(clock=ManualClock())
    assert isinstance(store.create_run(record), Written)
    inv = Invariants(store, signals=frozenset({"a", "b"}))
    if drained:
        after_drain(inv, [record.id])
    else:
        before_drain(inv, [record.id], faulted=faulted)
    return [v.invariant for v in inv.violations]


def test_what_a_sweep_still_has_to_do_is_not_settled() -> None:
    assert settled(_run("succeeded"))
    assert settled(_run("suspended", gate_a=_waiting("a")))  # nothing came: it waits
    assert not settled(_run("suspended", gate_a=_waiting("a", deadline=_AT)))  # a timeout
    due = replace(_run("suspended", gate_a=_waiting("a")), signals={"a": Signal({}, _AT)})
    assert not settled(due)
    assert not settled(_run("suspended"))  # reaped: nothing waits, a sweep resumes it
    assert not settled(_run("running"))


def test_a_due_signal_left_behind_is_named_before_the_drain_only_with_no_fault() -> None:
    due = replace(_run("suspended", gate_a=_waiting("a")), signals={"a": Signal({}, _AT)})
    assert _checked(due, drained=False) == ["signal-consumed"]
    assert _checked(due, drained=False, faulted=True) == []  # the drain decides
    assert _checked(due) == ["signal-consumed"]


def test_a_gate_passed_for_another_gates_signal_is_named() -> None:
    record = replace(_run("suspended", gate_a=TargetRecord(status="succeeded"),
                          gate_b=_waiting("b")), signals={"b": Signal({}, _AT)})  # fmt: skip
    assert "gate-once" in _checked(record)


def test_a_run_nobody_drives_after_the_drain_is_named() -> None:
    assert _checked(_run("running")) == ["lease-live"]
    assert _checked(_run("cancelling")) == ["lease-live"]


def test_an_end_or_a_wait_without_a_reason_is_named() -> None:
    assert _checked(_run("failed", deploy=TargetRecord(status="succeeded"))) == ["stated-reason"]
    said = RunEvent(at=_AT, tool="stop", actor="a", outcome="error", detail="lock lost")
    assert _checked(replace(_run("failed"), events=(said,))) == []
    assert _checked(_run("failed", deploy=TargetRecord(status="failed", error="boom"))) == []
    assert _checked(_run("suspended", deploy=TargetRecord(status="succeeded"))) == ["stated-reason"]
    assert _checked(_run("suspended", gate_a=_waiting("a"))) == []


@pytest.mark.parametrize(
    "seed",
    [
        417,  # a run stopped for a kept lock it lost ended failed with no reason recorded
        547,  # the same, another interleaving
        837,  # the stopped owner's write dropped its kept lock's row; the reaped run's
        # promote then ran unguarded (held-exclusive)
        899,  # a resumer paused since it read the run called on_timeout after a takeover
    ],
)
def test_the_seeds_that_found_bugs_stay_fixed(seed: int) -> None:
    result = run_seed(seed)
    assert result.violations == [], result.describe()


#: fan-out seeds in CI (make_scenario's ``fanout``): items each waiting for their own signal
FANOUT_SEEDS = 60


def test_fan_out_seeds_keep_each_items_signal_to_its_item() -> None:
    """A fan-out over two items, each item's gate waiting for its own signal, delivered per
    item (one twice, through MCP): every invariant holds, ``item-scope`` among them — an
    item's signal resumes that item only — and every item's stored signal is consumed
    (``signal-consumed``). Seed 18 found the engine dying of a ``KeyError`` when an item was
    parked as the run failed (fixed: tests/runs/test_fan_out_gates.py)."""
    for seed in range(FANOUT_SEEDS):
        result = run_seed(seed, fanout=True)
        assert result.violations == [] and not result.exhausted, result.describe()
