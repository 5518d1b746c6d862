"""A secret never names a fan-out item: an item holding a secret's value is keyed ``#index``.

Sub-target names are recorded, printed and committed in the clear, so a secret
array parameter used as ``for_each`` items must not become ``batch[<token>].one``.
The hidden key is the item's index, which every process that resolves the same
secrets computes alike: a resume, a sweep and a cancel's walk find the same rows.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.engine.fan_out_support import fan_build
from tests.runs.support import Harness
from zuke import Build, external_signal, parameter, target
from zuke._clock import ManualClock
from zuke._engine.fan_out import FanOutError
from zuke._engine.observer import FanOutProgress, Observer, Transition
from zuke._engine.result import RunResult
from zuke._engine.run import RunOptions, execute_async, load
from zuke._fan_out import decode_key, item_keys
from zuke._redact import Redactor
from zuke._target import TargetBuilder
from zuke.runs import cancel_run
from zuke.state.memory import MemoryStateStore
from zuke.state.wire import dumps_record

TOKENS = ["hunter2-token-aaaa", "hunter2-token-bbbb", "hunter2-token-cccc"]
ENV = {"REPOS": ",".join(TOKENS)}
#: what no output may contain: every token shares it
SECRET = "hunter2-token"


def secret_items(store: MemoryStateStore, stages: Any, **kw: Any) -> type[Build]:
    """``batch`` fanning out over ``--repos``, here a secret array parameter."""
    return fan_build(store, stages, extra={"repos": parameter("API tokens").secret().array()}, **kw)


class Everything(Observer):
    """Keeps every transition and progress report, to look for the secret in them."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def run_started(self, run_id: str, plan: Any) -> None:
        self.seen.append(repr(plan.order))

    async def transition(self, t: Transition) -> None:
        self.seen.append(repr(t))

    async def run_finished(self, result: RunResult) -> None:
        self.seen.append(repr(result))

    async def fan_out(self, progress: FanOutProgress) -> None:
        self.seen.append(repr(progress))


# --- keys ---------------------------------------------------------------------------------


def test_an_item_holding_a_secret_is_keyed_by_its_index_alone() -> None:
    secrets = Redactor(["hunter2-token-aaaa", "s3cret pass!", "12345678"])
    items = ["api", "hunter2-token-aaaa", "x/hunter2-token-aaaa/y", "", "deploy s3cret pass!"]
    keys = item_keys([*items, 12345678, "hunter2-token-aaaa", "api"], secrets)
    assert keys == ["api", "#1", "#2", "#3", "#4", "#5", "#6", "api#7"]
    assert len(set(keys)) == len(keys)
    # A positional key gives no text back; a readable one still does.
    assert [decode_key(k) for k in keys] == ["api", None, None, None, None, None, None, "api"]


def test_a_secret_that_shows_only_once_percent_encoded_still_hides_the_item() -> None:
    # "x/abcdefghij" is keyed "x%2Fabcdefghij", which holds the secret "2Fabcdefghij".
    assert item_keys(["x/abcdefghij"], Redactor(["2Fabcdefghij"])) == ["#0"]
    assert item_keys(["x/abcdefghij"], Redactor()) == ["x%2Fabcdefghij"]


# --- a run --------------------------------------------------------------------------------


def test_a_secret_array_as_items_names_nothing_in_the_record_the_result_or_the_events() -> None:
    store, targets = MemoryStateStore(), list[str]()

    def stages(token: Any, index: int) -> dict[str, TargetBuilder]:
        def one(ctx: Any) -> None:
            targets.append(ctx.target)
            ctx.state.set({"token": token, "index": index})

        def two() -> None:
            if index == 1:
                raise RuntimeError(f"the API refused {token}")

        return {"one": target().executes(one), "two": target().executes(two)}

    build = secret_items(store, stages, configure=lambda s: s.continue_on_item_failure())
    watcher, warnings = Everything(), list[str]()
    options = RunOptions(targets=["ship"], env=ENV, observers=[watcher], on_warning=warnings.append)
    result = asyncio.run(execute_async(build, options))
    assert result.status == "failed"
    assert sorted(targets) == ["batch[#0].one", "batch[#1].one", "batch[#2].one"]
    assert result.outcomes["batch[#1].two"].status == "failed"
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    record = found.record
    assert record.targets["batch"].error == "1 of 3 item(s) failed: #1 (two)"
    assert record.targets["batch[#0].one"].meta == {"token": "[redacted]", "index": 0}
    shown = [dumps_record(record), repr(result), *watcher.seen, *warnings]
    assert not [text for text in shown if SECRET in text]


def test_a_nested_fan_out_hides_its_own_secret_items_too() -> None:
    store, ran = MemoryStateStore(), list[str]()

    def stages(token: Any, index: int) -> dict[str, TargetBuilder]:
        inner = target().for_each(
            lambda: [f"{token}/east", "plain"],
            lambda region, i: {"go": target().executes(lambda ctx: ran.append(ctx.target))},
        )
        return {"regions": inner}

    result = asyncio.run(
        execute_async(secret_items(store, stages), RunOptions(targets=["ship"], env=ENV))
    )
    assert result.status == "succeeded"
    assert sorted(ran) == [
        f"batch[#{i}].regions[{key}].go" for i in range(3) for key in ("#0", "plain")
    ]


def test_a_stage_named_after_a_secret_fails_the_fan_out_without_quoting_it() -> None:
    store = MemoryStateStore()

    def stages(token: Any, index: int) -> dict[str, TargetBuilder]:
        return {f"use-{token}": target().executes(lambda: None)}

    result = asyncio.run(
        execute_async(secret_items(store, stages), RunOptions(targets=["ship"], env=ENV))
    )
    assert result.status == "failed"
    error = result.outcomes["batch"].error or ""
    assert "stage name contains the value of a secret parameter" in error
    assert SECRET not in error and not any(SECRET in name for name in result.outcomes)


def test_a_gate_whose_signal_is_named_after_a_secret_fails_the_fan_out_before_it_waits() -> None:
    store = MemoryStateStore()

    def stages(token: Any, index: int) -> dict[str, TargetBuilder]:
        return {"approve": target().waits_for(lambda s: s.on(external_signal(f"ok-{token}")))}

    result = asyncio.run(
        execute_async(secret_items(store, stages), RunOptions(targets=["ship"], env=ENV))
    )
    assert result.status == "failed"
    error = result.outcomes["batch"].error or ""
    assert "stage 'approve' waits for a trigger whose name contains the value of a secret" in error
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None and SECRET not in dumps_record(found.record)


def test_an_items_error_that_quotes_a_secret_is_clean_wherever_the_items_are_read() -> None:
    """Not only the run's own row: a sweep, a resume or a cancel's walk reads them too."""
    store = MemoryStateStore()

    def items(build: Build) -> Any:
        raise RuntimeError(f"inventory refused {build.repos.value[0]}")  # type: ignore[attr-defined]

    build = secret_items(store, lambda t, i: {"one": target()}, items=items)
    index = load(build, {}, ENV).index
    with pytest.raises(FanOutError) as raised:
        asyncio.run(index.get("batch[#0].one"))
    assert "its items function raised: inventory refused [redacted]" in str(raised.value)
    result = asyncio.run(execute_async(build, RunOptions(targets=["ship"], env=ENV)))
    assert SECRET not in (result.outcomes["batch"].error or "")


# --- other processes ----------------------------------------------------------------------


def gated(store: MemoryStateStore, calls: list[str]) -> Harness:
    """Each token's item: ``check``, a gate on the signal ``ok-<index>``, ``use``; each
    stage compensated."""

    def stages(token: Any, index: int) -> dict[str, TargetBuilder]:
        def step(stage: str) -> TargetBuilder:
            def body(ctx: Any) -> None:
                assert ctx.state.get() == {} or ctx.state.get()["token"] == "[redacted]"
                calls.append(f"{stage} {ctx.target}")
                ctx.state.set({"token": token})

            undo = target().executes(lambda ctx: calls.append(f"undo {ctx.target}"))
            return target().executes(body).on_cancel(undo)

        return {
            "check": step("check"),
            "approve": target().waits_for(lambda s: s.on(external_signal(f"ok-{index}"))),
            "use": step("use"),
        }

    return Harness(secret_items(store, stages), store, ManualClock(), env=dict(ENV))


def test_a_resume_names_the_items_as_the_run_that_suspended_did() -> None:
    store, calls = MemoryStateStore(), list[str]()
    h = gated(store, calls)
    first = h.start("ship")
    assert first.status == "suspended"
    names = set(h.statuses(first.run_id))
    assert {f"batch[#{i}].approve" for i in range(3)} <= names
    calls.clear()
    # The resumer loads the build again (the secret from its environment, as a new process
    # would: secrets are not recorded) and finds the same rows.
    resumed = h.resume(first.run_id, "ok-1")
    assert resumed.status == "suspended"
    assert calls == ["use batch[#1].use"]
    assert set(h.statuses(first.run_id)) == names | {"batch[#1].use"}
    assert not any(SECRET in w for w in h.warnings)
    assert SECRET not in dumps_record(h.record(first.run_id))


def test_a_cancel_walk_in_another_process_compensates_the_hidden_items_by_name() -> None:
    clock, calls = ManualClock(), list[str]()
    store = MemoryStateStore(clock=clock)
    h = gated(store, calls)
    h.clock = clock
    first = h.start("ship")
    h.resume(first.run_id, "ok-1")
    calls.clear()
    result = cancel_run(store, first.run_id, actor="ops", clock=clock, build=h.build, env=ENV)
    assert result.status == "cancelled", result
    assert calls == [
        "undo batch[#2].check.on_cancel",
        "undo batch[#1].use.on_cancel",
        "undo batch[#1].check.on_cancel",
        "undo batch[#0].check.on_cancel",
    ]
    record = h.record(first.run_id)
    done = [e.args["target"] for e in record.events if e.tool == "compensate"]
    assert done == ["batch[#2].check", "batch[#1].use", "batch[#1].check", "batch[#0].check"]
    assert not any("deterministic" in n for n in result.notes), result.notes
    assert SECRET not in dumps_record(record)
    assert SECRET not in json.dumps([*result.notes, str(result)])


@pytest.mark.parametrize("how", ["flag", "env"])
def test_the_secret_may_come_from_a_flag_or_the_environment(how: str) -> None:
    store, targets = MemoryStateStore(), list[str]()

    def stages(token: Any, index: int) -> dict[str, TargetBuilder]:
        return {"one": target().executes(lambda ctx: targets.append(ctx.target))}

    params = {"repos": [",".join(TOKENS)]} if how == "flag" else {}
    options = RunOptions(targets=["ship"], params=params, env=ENV if how == "env" else {})
    result = asyncio.run(execute_async(secret_items(store, stages), options))
    assert result.status == "succeeded"
    assert sorted(targets) == ["batch[#0].one", "batch[#1].one", "batch[#2].one"]
