"""A resumed fan-out: what an earlier process settled stays settled, ``retry`` included."""

from __future__ import annotations

from typing import Any

from tests.engine.fan_out_support import fan_build
from tests.runs.support import Harness
from zuke import external_signal, target
from zuke._clock import ManualClock
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore


def test_a_retried_fan_out_resumed_does_not_run_again_an_item_an_earlier_process_failed() -> None:
    store, calls = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        def deploy() -> None:
            calls.append(f"deploy {repo}")
            if repo == "a":
                raise RuntimeError("a is broken")

        return {
            "deploy": target().executes(deploy),
            "approve": target().waits_for(lambda s: s.on(external_signal(f"ok-{repo}"))),
        }

    build = fan_build(
        store,
        stages,
        batch=lambda t: t.retry(2),
        configure=lambda s: s.continue_on_item_failure(),
    )
    h = Harness(build, store, ManualClock())
    first = h.start("ship", params={"repos": ["a,b"]})
    assert first.status == "suspended"
    # This process tried a three times (once, then its two retries); b parked at its gate.
    assert calls.count("deploy a") == 3 and calls.count("deploy b") == 1
    assert h.statuses(first.run_id)["batch[a].deploy"] == "failed"
    calls.clear()
    final = h.resume(first.run_id, "ok-b")
    # The earlier process settled a failed: its failure is final, not retried here.
    assert calls == []
    assert final.status == "failed"
    record = h.record(first.run_id)
    assert record.targets["batch[a].deploy"].status == "failed"
    assert record.targets["batch[b].approve"].status == "succeeded"
    assert record.targets["batch"].error == "1 of 2 item(s) failed: a (deploy)"
