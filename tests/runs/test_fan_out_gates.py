"""A fan-out whose items hold gates: it suspends, and each item resumes on its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.engine.fan_out_support import fan_build
from tests.runs.support import Harness
from zuke import external_signal, resume_when, target
from zuke._clock import ManualClock
from zuke._errors import UnknownSignalError
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore


def gated(store: MemoryStateStore, calls: list[str], **kw: Any) -> Harness:
    """Items a, b, c: ``deploy``, then a gate on the signal ``ok-<item>``, then ``promote``."""

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {
            "deploy": target().executes(lambda: calls.append(f"deploy {repo}")),
            "approve": target().waits_for(lambda s: s.on(external_signal(f"ok-{repo}"))),
            "promote": target().executes(lambda: calls.append(f"promote {repo}")),
        }

    build = fan_build(store, stages, after=lambda: calls.append("ship"), **kw)
    return Harness(build, store, ManualClock())


def start(h: Harness) -> str:
    result = h.start("ship", params={"repos": ["a,b,c"]})
    assert result.status == "suspended"
    return result.run_id


def test_a_fan_out_with_gates_suspends_with_every_item_parked_at_its_gate() -> None:
    store, calls = MemoryStateStore(), list[str]()
    h = gated(store, calls)
    run_id = start(h)
    assert sorted(calls) == ["deploy a", "deploy b", "deploy c"]
    got = h.statuses(run_id)
    assert got["batch"] == "waiting" and got["ship"] == "pending"
    assert {got[f"batch[{r}].approve"] for r in "abc"} == {"waiting"}
    assert h.record(run_id).targets["batch[b].approve"].waiting_for.trigger == "signal:ok-b"  # type: ignore[union-attr]


def test_each_item_resumes_on_its_own_signal_and_nothing_settled_runs_again() -> None:
    store, calls = MemoryStateStore(), list[str]()
    h = gated(store, calls)
    run_id = start(h)
    calls.clear()
    first = h.resume(run_id, "ok-b")
    assert first.status == "suspended"
    assert calls == ["promote b"]  # no deploy again, and a and c stay parked
    got = h.statuses(run_id)
    assert got["batch[b].promote"] == "succeeded" and got["batch[a].approve"] == "waiting"
    h.resume(run_id, "ok-a")
    final = h.resume(run_id, "ok-c")
    assert final.status == "succeeded"
    assert calls == ["promote b", "promote a", "promote c", "ship"]
    assert h.statuses(run_id)["batch"] == "succeeded"


def test_a_signal_for_a_gate_inside_an_item_is_recognised_as_awaited() -> None:
    store, calls = MemoryStateStore(), list[str]()
    h = gated(store, calls)
    run_id = start(h)
    h.resume(run_id, "ok-a")
    assert not any("not waiting for the signal" in w for w in h.warnings)
    with pytest.raises(UnknownSignalError, match="'ok-b', 'ok-c'"):
        h.resume(run_id, "nope")


def test_a_sweep_checks_a_predicate_gate_inside_an_item_and_resumes_only_when_it_holds(
    tmp_path: Path,
) -> None:
    store, calls = MemoryStateStore(), list[str]()
    flag = tmp_path / "approved"

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {
            "deploy": target().executes(lambda: calls.append(f"deploy {repo}")),
            "soak": target().waits_for(lambda s: s.on(resume_when(flag.exists))),
            "promote": target().executes(lambda: calls.append(f"promote {repo}")),
        }

    h = Harness(fan_build(store, stages, after=lambda: calls.append("ship")), store, ManualClock())
    result = h.start("ship", params={"repos": ["a,b"]})
    assert result.status == "suspended"
    report = h.sweep()
    assert [e.action for e in report.entries] == ["still-waiting"]
    assert report.entries[0].gate == "batch[a].soak"
    flag.touch()
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [("resumed", "succeeded")]
    assert calls.count("deploy a") == 1 and calls[-1] == "ship"


def test_a_failure_that_stops_the_batch_settles_the_parked_items_skipped() -> None:
    store, _calls = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def deploy() -> None:
            if repo == "c":
                raise RuntimeError("c is broken")

        return {
            "deploy": target().executes(deploy),
            "approve": target().waits_for(lambda s: s.on(external_signal("ok"))),
        }

    h = Harness(
        fan_build(store, stages, configure=lambda s: s.concurrency(1)), store, ManualClock()
    )
    result = h.start("ship", params={"repos": ["a,b,c"]})
    assert result.status == "failed"
    got = h.statuses(result.run_id)
    assert got["batch[a].approve"] == "skipped" and got["batch[b].approve"] == "skipped"
    assert h.record(result.run_id).status == "failed"


def test_with_isolation_a_failed_item_does_not_keep_the_others_from_suspending() -> None:
    store, _calls = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def deploy() -> None:
            if repo == "a":
                raise RuntimeError("a is broken")

        return {
            "deploy": target().executes(deploy),
            "approve": target().waits_for(lambda s: s.on(external_signal(f"ok-{repo}"))),
        }

    h = Harness(
        fan_build(store, stages, configure=lambda s: s.continue_on_item_failure()),
        store,
        ManualClock(),
    )
    result = h.start("ship", params={"repos": ["a,b"]})
    assert result.status == "suspended"  # b waits; a's failure is judged when the batch ends
    final = h.resume(result.run_id, "ok-b")
    assert final.status == "failed"
    assert h.record(result.run_id).targets["batch"].error == "1 of 2 item(s) failed: a (deploy)"


def test_an_item_parked_at_its_gate_when_another_target_fails_is_settled_skipped() -> None:
    """Found by the simulation's fan-out scenarios (seed 18, ``no-engine-error``): an item
    parked at its gate while another target of the run failed — the run ends ``failed``,
    not suspended — was left out of the settling, and the engine died of a ``KeyError``
    naming the item's gate. It is settled ``skipped`` with the rest."""
    from zuke import Build

    clock = ManualClock()
    store = MemoryStateStore(clock=clock)

    def boom_body(ctx: Any) -> None:
        raise RuntimeError("boom")

    def batch(self: Build, t: TargetBuilder) -> TargetBuilder:
        def stages(item: str, index: int) -> dict[str, Any]:
            return {"approve": target().waits_for(lambda s: s.on(external_signal(f"go-{item}")))}

        return t.for_each(lambda: ["x"], stages)

    def boom(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(boom_body)

    def release(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.batch, self.boom)  # type: ignore[attr-defined]

    namespace = {"state_store": lambda self: store, "batch": target(batch),
                 "boom": target(boom), "release": target(release)}  # fmt: skip
    build = type("FanFails", (Build,), namespace)
    result = Harness(build, store, clock).start("release")
    assert result.status == "failed"
    assert result.outcomes["batch[x].approve"].status == "skipped"
    assert result.outcomes["boom"].status == "failed"
