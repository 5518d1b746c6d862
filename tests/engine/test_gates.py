"""Gates in the engine: pass-through, suspending, the trigger seam, and settings checked at load."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.runs.support import HOUR, Harness, approval, release_build
from zuke import (
    Build,
    BuildDefinitionError,
    GraphError,
    NotYet,
    Satisfied,
    Target,
    WaitContext,
    WaitFailed,
    WaitTrigger,
    resume_when,
    target,
)
from zuke._clock import ManualClock
from zuke._engine.run import load
from zuke._target import TargetBuilder
from zuke._waits import WaitSettings
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore


def harness(gate: Callable[[Build, WaitSettings], Any] | None = None) -> tuple[Harness, list[Any]]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    return Harness(release_build(store, calls, gate=gate), store, clock), calls


def test_a_satisfied_gate_passes_through_and_its_dependents_run_in_the_same_process() -> None:
    h, calls = harness(approval(resume_when(lambda: True)))
    result = h.start()
    assert result.status == "succeeded"
    assert ("promote", None, "api") in calls
    assert h.statuses(result.run_id)["approve"] == "succeeded"
    assert h.record(result.run_id).status == "succeeded"


def test_an_async_predicate_is_awaited() -> None:
    async def ready() -> bool:
        await asyncio.sleep(0)
        return True

    h, _ = harness(approval(resume_when(ready)))
    assert h.start().status == "succeeded"


def test_a_waiting_gate_suspends_the_run_after_the_independent_branch_finished() -> None:
    h, calls = harness()
    result = h.start()
    assert result.status == "suspended" and result.ok
    assert calls == ["deploy", "lint"]
    record = h.record(result.run_id)
    assert record.status == "suspended"
    assert h.statuses(result.run_id) == {
        "deploy": "succeeded",
        "approve": "waiting",
        "promote": "pending",
        "lint": "succeeded",
        "release": "pending",
    }
    waiting = record.targets["approve"].waiting_for
    assert waiting is not None
    now = h.clock.now_ms()
    assert waiting.trigger == "signal:approved"
    assert waiting.deadline is not None and waiting.deadline == h_iso(now + 72 * HOUR)
    assert (waiting.on_timeout, waiting.on_timeout_is_target) == ("fail", False)
    assert result.waiting == {"approve": waiting}


def h_iso(ms: int) -> str:
    from zuke._clock import iso

    return iso(ms)


def test_the_disposition_of_a_rollback_gate_is_recorded_as_a_target() -> None:
    h, _ = harness(approval(on_timeout="rollback"))
    waiting = h.record(h.start().run_id).targets["approve"].waiting_for
    assert waiting is not None
    assert (waiting.on_timeout, waiting.on_timeout_is_target) == ("rollback", True)


def test_a_suspended_record_is_fsynced_before_the_run_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zuke.state.filesystem as fs

    synced: list[bool] = []
    real = fs.append_line  # type: ignore[attr-defined]

    def spy(path: str, line: bytes, **kwargs: Any) -> int:
        if b'"suspended"' in line:
            synced.append(kwargs["sync"])
        return real(path, line, **kwargs)

    monkeypatch.setattr(fs, "append_line", spy)
    clock = ManualClock()
    store = FileSystemStateStore(tmp_path, clock=clock)
    h = Harness(release_build(store, []), store, clock)
    assert h.start().status == "suspended"
    assert synced == [True]


class Dispatch(WaitTrigger):
    """A trigger that starts remote work once and polls it: the ``zuke_gh`` shape."""

    def __init__(self, remote: dict[str, Any], store: Any = None) -> None:
        self.remote = remote
        self.store = store

    @property
    def descriptor(self) -> str:
        return "dispatch:e2e"

    async def check(self, ctx: WaitContext) -> NotYet | Satisfied | WaitFailed:
        state = ctx.state.get()
        if "marker" not in state:
            ctx.state.set({"marker": f"m-{ctx.run_id[:8]}", "env": ctx.params.get("repo")})
            await ctx.persist()  # durable before the external call
            seen = self.store.get_run(ctx.run_id).record.targets[ctx.target].meta
            self.remote["dispatched"] = [*self.remote.get("dispatched", []), dict(seen)]
            return NotYet("dispatched")
        verdict = self.remote.get(state["marker"])
        if verdict is None:
            return NotYet("the workflow is still running")
        if verdict == "failed":
            return WaitFailed("the e2e workflow failed")
        ctx.state.set({"passed": True})
        return Satisfied(verdict)


def test_a_custom_trigger_persists_its_state_before_its_external_call_and_a_fresh_build_checks_it(
    tmp_path: Path,
) -> None:
    clock = ManualClock()
    store = FileSystemStateStore(tmp_path, clock=clock)
    remote: dict[str, Any] = {}
    first = release_build(store, [], gate=approval(Dispatch(remote, store)))
    h = Harness(first, store, clock)
    result = h.start()
    assert result.status == "suspended"
    # The marker was in the record when the external call was made.
    marker = f"m-{result.run_id[:8]}"
    assert remote["dispatched"] == [{"marker": marker, "env": "api"}]

    # A sweep in a new process: a fresh build class, a fresh store object, the record alone.
    store2 = FileSystemStateStore(tmp_path, clock=clock)
    calls: list[Any] = []
    fresh = Harness(release_build(store2, calls, gate=approval(Dispatch(remote))), store2, clock)
    report = fresh.sweep()
    assert [(e.action, e.result) for e in report.entries] == [("still-waiting", "suspended")]
    assert len(remote["dispatched"]) == 1  # never dispatched twice
    remote[marker] = "passed"
    report = fresh.sweep()
    assert [(e.action, e.result) for e in report.entries] == [("resumed", "succeeded")]
    assert ("promote", None, "api") in calls
    assert fresh.record(result.run_id).targets["approve"].meta == {
        "marker": marker, "env": "api", "passed": True,
    }  # fmt: skip


def test_a_trigger_that_reports_failure_fails_the_gate_and_the_run() -> None:
    h, calls = harness(approval(resume_when(lambda: True)))
    failing = release_build(
        h.store, calls, gate=approval(_Answer(WaitFailed("the dispatch was refused")))
    )
    result = Harness(failing, h.store, h.clock).start()
    assert result.status == "failed"
    assert result.outcomes["approve"].error == "the dispatch was refused"
    assert h.statuses(result.run_id)["promote"] == "skipped"


class _Answer(WaitTrigger):
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    @property
    def descriptor(self) -> str:
        return "fixed"

    def check(self, ctx: WaitContext) -> Any:
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


def test_a_raising_predicate_leaves_the_gate_waiting_and_says_why() -> None:
    def flaky() -> bool:
        raise ConnectionError("status page unreachable")

    h, _ = harness(approval(resume_when(flaky)))
    result = h.start()
    assert result.status == "suspended"
    waiting = h.record(result.run_id).targets["approve"].waiting_for
    assert waiting is not None and waiting.detail is not None
    assert "status page unreachable" in waiting.detail
    assert any("gate approve" in w and "stays waiting" in w for w in h.warnings)


def test_a_raising_trigger_never_writes_a_secret_into_the_record() -> None:
    def leaky() -> bool:
        raise RuntimeError("auth failed for hunter2-secret")

    h, _ = harness(approval(resume_when(leaky)))
    result = h.start(params={"token": ["hunter2-secret"]})
    text = json.dumps(h.store.get_run(result.run_id).record.targets["approve"].waiting_for.detail)  # type: ignore[union-attr]
    assert "hunter2-secret" not in text and "auth failed" in text
    assert not any("hunter2-secret" in w for w in h.warnings)


def test_a_trigger_answering_something_else_is_a_definition_error_naming_it() -> None:
    h, _ = harness(approval(_Answer("yes")))
    result = h.start()
    assert result.status == "failed"
    assert "answered 'yes'" in (result.outcomes["approve"].error or "")


def test_a_bool_answer_means_satisfied_or_not_yet() -> None:
    h, _ = harness(approval(_Answer(True)))
    assert h.start().status == "succeeded"
    h, _ = harness(approval(_Answer(False)))
    assert h.start().status == "suspended"


BAD: Any = "no"


def gate_with(define: Callable[[Any, TargetBuilder], TargetBuilder]) -> type[Build]:
    def rollback(self: Any, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None)

    gate = target(define)
    gate.name = "gate"
    return type("Gated", (Build,), {"gate": gate, "rollback": target(rollback)})


@pytest.mark.parametrize(
    ("define", "message"),
    [
        (lambda self, t: t.waits_for(lambda s: s), "sets no trigger"),
        (lambda self, t: t.waits_for(lambda s: s.on("approved")), "on() takes a trigger"),
        (
            lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool)).timeout("soon")),
            "timeout()",
        ),
        (
            lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool)).on_timeout("explode")),
            'on_timeout() takes "fail", "cancel-run" or a target',
        ),
        (
            lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool))).executes(print),
            "a gate has no body",
        ),
        (
            lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool))).lock(lambda s: s),
            "a gate takes no lock",
        ),
        (
            lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool))).timeout("1h"),
            "timeout()/retry() apply to a body",
        ),
        (
            lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool))).retry(2),
            "timeout()/retry() apply to a body",
        ),
        (lambda self, t: t.waits_for(lambda s: 1 / 0), "its waits_for() settings raised"),
        (lambda self, t: t.waits_for(lambda s: s.on(resume_when(BAD))), "needs a callable"),
    ],
)
def test_bad_gate_settings_fail_the_load_naming_the_gate(
    define: Callable[[Any, TargetBuilder], TargetBuilder], message: str
) -> None:
    with pytest.raises(BuildDefinitionError) as caught:
        load(gate_with(define), {}, {})
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_timeout_into_an_unknown_target_is_a_graph_error() -> None:
    build = gate_with(
        lambda self, t: t.waits_for(lambda s: s.on(resume_when(bool)).on_timeout(Target("ghost")))
    )
    with pytest.raises(GraphError, match="on_timeout\\(\\) names unknown target 'ghost'"):
        load(build, {}, {})


def test_a_bad_build_deadline_is_a_clean_load_error() -> None:
    h, _ = harness()
    bad = release_build(h.store, [], deadline="whenever")
    with pytest.raises(BuildDefinitionError, match=r"Build\.deadline\(\)"):
        Harness(bad, h.store, h.clock).start()
    assert h.store.list_runs() == []
