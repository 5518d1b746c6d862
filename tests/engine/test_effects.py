"""Crash-durable effects: the intent is durable before the body, a done effect never runs again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.runs.support import Harness
from zuke import Build, LockAcquired, LockHolder, StateError, external_signal, target
from zuke._clock import ManualClock, iso
from zuke._engine.run import RunOptions, execute_async
from zuke._target import TargetBuilder
from zuke.state._protocol import StateStore
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import EffectRecord, GraphNode, RunRecord, TargetRecord


def effect_build(
    store: StateStore | None, calls: list[Any], *, fail: str | None = None
) -> type[Build]:
    """``deploy`` (a body, then effects ``notify`` and ``tag``) → ``verify``."""

    def effect(name: str) -> Any:
        def body(ctx: Any) -> None:
            calls.append((name, ctx.redriven))
            if name == fail:
                raise RuntimeError(f"{name} refused")

        return body

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return (
            t.executes(lambda ctx: calls.append(("deploy", ctx.redriven)))
            .effect("notify", effect("notify"))
            .effect("tag", effect("tag"))
        )

    def verify(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.deploy).executes(lambda: calls.append("verify"))  # type: ignore[attr-defined]

    namespace: dict[str, Any] = {"deploy": target(deploy), "verify": target(verify)}
    if store is not None:
        namespace["state_store"] = lambda self: store
    return type("Ship", (Build,), namespace)


def test_an_effects_intent_is_in_the_journal_and_synced_before_its_body_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import zuke.state.filesystem as fs

    appends: list[tuple[bytes, bool]] = []
    real = fs.append_line  # type: ignore[attr-defined]

    def spy(path: str, line: bytes, **kwargs: Any) -> int:
        appends.append((line, kwargs["sync"]))
        return real(path, line, **kwargs)

    monkeypatch.setattr(fs, "append_line", spy)
    store = FileSystemStateStore(tmp_path)
    seen: list[Any] = []

    def notify(ctx: Any) -> None:
        # What a process killed right now would leave behind: the intent, on disk.
        text = Path(store.path_of(ctx.run_id)).read_text()
        pending = [line for line in text.splitlines() if '"pending"' in line and "notify" in line]
        seen.append(bool(pending))
        seen.append([sync for line, sync in appends if b'"pending"' in line and b"notify" in line])
        row = store.get_run(ctx.run_id).record.targets["deploy"].effects["notify"]  # type: ignore[union-attr]
        seen.append((row.status, row.attempts))

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None).effect("notify", notify)

    build = type("Ship", (Build,), {"deploy": target(deploy), "state_store": lambda self: store})
    result = asyncio.run(execute_async(build, RunOptions(targets=["deploy"], env={})))
    assert result.status == "succeeded"
    assert seen == [True, [True], ("pending", 1)]
    row = store.get_run(result.run_id).record.targets["deploy"].effects["notify"]  # type: ignore[union-attr]
    assert row.status == "done" and row.done_at is not None and row.attempts == 1


def test_effects_run_after_the_body_in_order_and_are_recorded_done() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(effect_build(store, calls), store, clock)
    result = h.start("verify")
    assert result.status == "succeeded"
    assert calls == [("deploy", False), ("notify", False), ("tag", False), "verify"]
    effects = h.record(result.run_id).targets["deploy"].effects
    assert {n: (e.status, e.attempts) for n, e in effects.items()} == {
        "notify": ("done", 1),
        "tag": ("done", 1),
    }


def test_a_failed_effect_fails_its_target_and_later_effects_do_not_run() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(effect_build(store, calls, fail="notify"), store, clock)
    result = h.start("verify")
    assert result.status == "failed"
    assert calls == [("deploy", False), ("notify", False)]
    assert result.outcomes["deploy"].error == "effect 'notify' failed: RuntimeError: notify refused"
    assert result.outcomes["verify"].status == "skipped"
    row = h.record(result.run_id).targets["deploy"]
    assert row.status == "failed"
    assert row.effects["notify"].status == "failed"
    assert row.effects["notify"].error == "RuntimeError: notify refused"
    assert "tag" not in row.effects


def crashed_run(store: MemoryStateStore, clock: ManualClock) -> str:
    """A run whose process died after ``notify`` was done and ``tag`` was intended."""
    holder = LockHolder("ci", "run-e", iso(clock.now_ms()))
    lease = store.acquire_lock("zuke-run-run-e", holder, 1_000)
    assert isinstance(lease, LockAcquired)
    stamp = iso(clock.now_ms())
    store.create_run(
        RunRecord(
            id="run-e", build="Ship", root_target="verify", status="running", actor="ci",
            created_at=stamp, updated_at=stamp,
            graph=(GraphNode("deploy"), GraphNode("verify", ("deploy",))),
            targets={
                "deploy": TargetRecord(
                    status="running",
                    started_at=stamp,
                    effects={
                        "notify": EffectRecord("done", intent_at=stamp, done_at=stamp, attempts=1),
                        "tag": EffectRecord("pending", intent_at=stamp, attempts=1),
                    },
                ),
                "verify": TargetRecord(),
            },
            locks={"zuke-run-run-e": lease.token},
        )
    )  # fmt: skip
    clock.advance(1_001)  # the lease lapses: nobody renews it
    return "run-e"


def test_a_reaped_run_re_drives_its_owed_effect_once_and_skips_the_completed_one() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(effect_build(store, calls), store, clock)
    run_id = crashed_run(store, clock)
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [
        ("reaped", "suspended"),
        ("resumed", "succeeded"),
    ]
    # The body is repeated (told so); the done effect is not; the owed one runs again.
    assert calls == [("deploy", True), ("tag", True), "verify"]
    effects = h.record(run_id).targets["deploy"].effects
    assert (effects["notify"].status, effects["notify"].attempts) == ("done", 1)
    assert (effects["tag"].status, effects["tag"].attempts) == ("done", 2)
    assert effects["tag"].intent_at == iso(clock.now_ms() - 1_001)  # the first intent is kept
    assert h.sweep().entries == []  # a second sweep has nothing to do
    assert calls == [("deploy", True), ("tag", True), "verify"]


def _gate(self: Build, t: TargetBuilder) -> TargetBuilder:
    return t.waits_for(lambda s: s.on(external_signal("go")))


def _lock(self: Build, t: TargetBuilder) -> TargetBuilder:
    return t.lock(lambda s: s.lock_key("deploy").with_ttl("30m")).executes(lambda: None)


def _effect(self: Build, t: TargetBuilder) -> TargetBuilder:
    return t.executes(lambda: None).effect("notify", lambda: None)


@pytest.mark.parametrize("define", [_gate, _lock, _effect], ids=["gate", "lock", "effect"])
def test_a_run_that_needs_state_is_refused_when_state_is_off(define: Any, tmp_path: Path) -> None:
    build = type("NeedsState", (Build,), {"only": target(define)})
    options = RunOptions(targets=["only"], env={"ZUKE_STATE": "off"}, cwd=tmp_path)
    with pytest.raises(StateError) as caught:
        asyncio.run(execute_async(build, options))
    message = str(caught.value)
    assert "ZUKE_STATE=off" in message and "unset ZUKE_STATE" in message and "\n" not in message
    assert not (tmp_path / ".zuke").exists()


def test_a_run_that_needs_no_state_runs_with_state_off(tmp_path: Path) -> None:
    calls: list[Any] = []
    build = type(
        "Plain", (Build,), {"only": target(lambda self, t: t.executes(lambda: calls.append(1)))}
    )
    options = RunOptions(targets=["only"], env={"ZUKE_STATE": "off"}, cwd=tmp_path)
    result = asyncio.run(execute_async(build, options))
    assert result.status == "succeeded" and not result.recorded and calls == [1]


def test_an_effect_is_recorded_in_the_records_json_with_its_intent() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    h = Harness(effect_build(store, []), store, clock)
    result = h.start("verify")
    from zuke.state.wire import record_to_json

    raw = json.loads(json.dumps(record_to_json(h.record(result.run_id))))
    notify = raw["targets"]["deploy"]["effects"]["notify"]
    assert notify["status"] == "done" and notify["attempts"] == 1
    assert {"intentAt", "doneAt"} <= set(notify)
