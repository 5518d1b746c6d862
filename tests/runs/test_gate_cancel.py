"""``WaitTrigger.on_cancel``: each gate still waiting when its run is cancelled is told once,
under the run's lease, before the compensations, on every cancel path — ``zuke cancel`` of a
suspended run, of a live owner's run (the owner tells them), a gate's ``"cancel-run"``, a
timeout's rollback that skips the other gates, a walk finished by a sweep — with its answer
(or the exception) recorded in the run's events; a hook that raises never stops the cancel."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from tests.runs.support import HOUR, Harness
from zuke import Build, LockAcquired, LockHolder, NotYet, WaitContext, WaitFailed, target
from zuke._clock import ManualClock
from zuke._engine.gate_cancel import GATE_CANCEL_EVENT
from zuke._engine.run import RunOptions, execute_async
from zuke._target import TargetBuilder
from zuke._waits import WaitTrigger
from zuke.runs.cancel import cancel_run
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta
from zuke.state.update import update_run


class Remote(WaitTrigger):
    """A gate that started something remote; ``on_cancel`` says what it did with it."""

    def __init__(self, name: str, log: list[Any], store: MemoryStateStore, *,
                 raises: bool = False, fail: bool = False) -> None:  # fmt: skip
        self.name, self.log, self.store = name, log, store
        self.raises, self.fail = raises, fail

    @property
    def descriptor(self) -> str:
        return f"remote:{self.name}"

    def check(self, ctx: WaitContext) -> NotYet | WaitFailed:
        return WaitFailed(f"{self.name} was refused") if self.fail else NotYet("running")

    async def on_cancel(self, ctx: WaitContext) -> str | None:
        found = self.store.get_run(ctx.run_id)
        assert found is not None
        done = [e.tool for e in found.record.events if e.tool == "compensate"]
        self.log.append(("on_cancel", ctx.target, found.record.status, done, ctx.actor,
                         ctx.resumed_by))  # fmt: skip
        if self.raises:
            raise RuntimeError(f"{self.name}: GitHub said 500")
        return f"cancelled the remote run of {self.name}"


def build(
    store: MemoryStateStore,
    log: list[Any],
    triggers: dict[str, Remote],
    *,
    on_failure: str | None = None,
    on_timeout: str | None = None,
) -> type[Build]:
    """``deploy`` (compensated by ``undeploy``) → gates ``e2e`` and ``perf`` → ``promote``."""

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.on_cancel(self.undeploy).executes(lambda: log.append("deploy"))  # type: ignore[attr-defined]

    def gate(name: str) -> Any:
        def define(self: Build, t: TargetBuilder) -> TargetBuilder:
            def configure(s: Any) -> Any:
                s = s.on(triggers[name]).timeout("1h")
                if on_failure is not None and name == "e2e":
                    s = s.on_failure(self.rollback if on_failure == "rollback" else on_failure)  # type: ignore[attr-defined]
                if on_timeout is not None and name == "e2e":
                    s = s.on_timeout(self.rollback if on_timeout == "rollback" else on_timeout)  # type: ignore[attr-defined]
                return s

            return t.depends_on(self.deploy).waits_for(configure)  # type: ignore[attr-defined]

        define.__name__ = name
        return define

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.e2e, self.perf).executes(lambda: log.append("promote"))  # type: ignore[attr-defined]

    def undeploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: log.append("undeploy"))

    def rollback(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: log.append("rollback"))

    namespace: dict[str, Any] = {"state_store": lambda self: store}
    for fn in (deploy, gate("e2e"), gate("perf"), promote, undeploy, rollback):
        namespace[fn.__name__] = target(fn)
    return type("Release", (Build,), namespace)


def parked(**kwargs: Any) -> tuple[Harness, list[Any], dict[str, Remote], str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    log: list[Any] = []
    raises = kwargs.pop("raises", ())
    triggers = {n: Remote(n, log, store, raises=n in raises) for n in ("e2e", "perf")}
    h = Harness(build(store, log, triggers, **kwargs), store, clock)
    result = asyncio.run(execute_async(h.build, h.options(targets=["promote"], actor="alice")))
    assert result.status == "suspended", result
    return h, log, triggers, result.run_id


def told(h: Harness, run_id: str) -> list[tuple[str, str, str | None, str]]:
    return [(e.args["gate"], e.actor, e.detail, e.outcome)
            for e in h.record(run_id).events if e.tool == GATE_CANCEL_EVENT]  # fmt: skip


def test_cancel_of_a_suspended_run_tells_each_waiting_gate_before_the_compensations() -> None:
    h, log, _, run_id = parked()
    result = cancel_run(h.store, run_id, actor="carol", build=h.build, env={}, clock=h.clock)
    assert result.status == "cancelled"
    calls = [c for c in log if isinstance(c, tuple)]
    assert calls == [
        ("on_cancel", "e2e", "cancelling", [], "alice", "carol"),
        ("on_cancel", "perf", "cancelling", [], "alice", "carol"),
    ]  # under the lease, the run cancelling, before any compensation
    assert log[-1] == "undeploy"
    assert told(h, run_id) == [
        ("e2e", "carol", "cancelled the remote run of e2e", "ok"),
        ("perf", "carol", "cancelled the remote run of perf", "ok"),
    ]
    assert result.gates == [
        "gate 'e2e': cancelled the remote run of e2e",
        "gate 'perf': cancelled the remote run of perf",
    ]
    # a suspended run is "suspended", not "its owner was gone"
    summary = result.summary()
    assert "it was suspended" in summary and "owner was gone" not in summary
    assert "Gate 'e2e': cancelled the remote run of e2e." in summary
    [event] = [e for e in h.record(run_id).events if e.tool == "cancel" and e.args]
    assert event.detail == "cancelled by carol; the run was suspended"


def test_a_hook_that_raises_is_recorded_and_the_cancel_goes_on() -> None:
    h, log, _, run_id = parked(raises=("e2e",))
    result = cancel_run(h.store, run_id, actor="carol", build=h.build, env={}, clock=h.clock)
    assert result.status == "cancelled" and "undeploy" in log
    assert told(h, run_id) == [
        ("e2e", "carol", "its on_cancel hook raised RuntimeError: e2e: GitHub said 500", "error"),
        ("perf", "carol", "cancelled the remote run of perf", "ok"),
    ]


def test_without_compensations_the_gates_are_still_told() -> None:
    h, log, _, run_id = parked()
    result = cancel_run(h.store, run_id, actor="carol", build=h.build, env={}, clock=h.clock,
                        compensations="skip")  # fmt: skip
    assert result.status == "cancelled" and "undeploy" not in log
    assert [g for g, *_ in told(h, run_id)] == ["e2e", "perf"]


def test_without_a_build_the_gates_cannot_be_told_and_the_cancel_says_so() -> None:
    h, _, _, run_id = parked()
    result = cancel_run(h.store, run_id, actor="carol", env={}, clock=h.clock,
                        compensations="skip")  # fmt: skip
    assert result.status == "cancelled" and told(h, run_id) == []
    assert any("gates e2e, perf were not told of the cancel" in n for n in result.notes)


def test_a_walk_finished_by_a_sweep_does_not_tell_a_gate_twice() -> None:
    """The canceller recorded e2e's answer, then died: the sweep that finishes the walk tells
    only perf."""
    h, log, _, run_id = parked()
    lease = h.store.acquire_lock(f"zuke-run-{run_id}", LockHolder("carol", run_id, "t"), 1000)
    assert isinstance(lease, LockAcquired)
    from zuke.state.records import RunEvent

    said = RunEvent(at="t", tool=GATE_CANCEL_EVENT, actor="carol", detail="done",
                    args={"gate": "e2e"})  # fmt: skip

    def died(record: Any) -> RunDelta:
        return RunDelta(updated_at=record.updated_at, status="cancelling",
                        intended_terminal="cancelled", events=(said,),
                        locks={f"zuke-run-{run_id}": lease.token})  # fmt: skip

    update_run(h.store, run_id, died)
    h.clock.advance(1001)
    [entry] = h.sweep(actor="sweeper").entries
    assert (entry.action, entry.result) == ("reaped", "cancelled")
    assert [c[1] for c in log if isinstance(c, tuple)] == ["perf"]
    assert [(g, a) for g, a, *_ in told(h, run_id)] == [("e2e", "carol"), ("perf", "sweeper")]


@pytest.mark.parametrize("disposition", ["cancel-run", "rollback"])
def test_a_gate_that_fails_into_a_cancel_tells_the_other_waiting_gate(disposition: str) -> None:
    h, log, triggers, run_id = parked(on_failure=disposition)
    triggers["e2e"].fail = True
    [entry] = h.sweep(actor="sweeper").entries
    assert (entry.action, entry.result) == ("gate-failed", "cancelled")
    # e2e failed (it is no longer waiting); perf still was, and is told once
    assert [(c[1], c[5]) for c in log if isinstance(c, tuple)] == [("perf", "sweeper")]
    assert [g for g, *_ in told(h, run_id)] == ["perf"]
    assert h.record(run_id).targets["perf"].status == "skipped"


def test_a_timeout_rollback_tells_the_gates_it_skips() -> None:
    h, log, _, run_id = parked(on_timeout="rollback")
    h.clock.advance(HOUR + 1)
    report = h.sweep(actor="sweeper")
    assert [(e.action, e.result) for e in report.entries] == [("timed-out", "cancelled")]
    # the timed-out gate gets its on_timeout; perf, skipped by the rollback, its on_cancel
    assert [(c[1], c[2]) for c in log if isinstance(c, tuple)] == [("perf", "suspended")]
    assert [g for g, *_ in told(h, run_id)] == ["perf"]
    assert log.index("rollback") > 0


def test_a_live_owner_tells_its_waiting_gates_when_zuke_cancel_asks_it_to_stop() -> None:
    """A gate waits while another branch still runs; ``zuke cancel`` from elsewhere only marks
    the run: the owner, which has the build and the lease, tells the gate in its walk."""
    store = MemoryStateStore()
    log: list[Any] = []
    trigger = Remote("e2e", log, store)

    class Release(Build):
        def state_store(self) -> MemoryStateStore:
            return store

        @target
        def e2e(self, t: TargetBuilder) -> TargetBuilder:
            return t.waits_for(lambda s: s.on(trigger))

        @target
        def soak(self, t: TargetBuilder) -> TargetBuilder:
            async def body(ctx: Any) -> None:
                def ask() -> None:
                    log.append(cancel_run(store, ctx.run_id, actor="carol").status)

                await asyncio.to_thread(ask)
                await asyncio.Event().wait()  # until the owner sees the cancel

            return t.executes(body)

        @target
        def promote(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.e2e, self.soak).executes(lambda: log.append("promote"))

    options = RunOptions(targets=["promote"], env={"ZUKE_CANCEL_POLL": "20ms"}, actor="alice")
    result = asyncio.run(execute_async(Release, options))
    assert result.status == "cancelled"
    assert log[0] == "cancelling"  # the canceller only marked it
    assert [c[1:3] for c in log if isinstance(c, tuple)] == [("e2e", "cancelling")]
    found = store.get_run(result.run_id)
    assert found is not None
    [event] = [e for e in found.record.events if e.tool == GATE_CANCEL_EVENT]
    assert (event.args["gate"], event.actor) == ("e2e", "alice")  # the owner's own actor
    row = found.record.targets["e2e"]  # skipped as the run stopped, keeping what it waited for
    assert row.status == "skipped" and row.waiting_for is not None


def test_a_gate_its_cancelled_owner_skipped_before_dying_is_told_by_the_sweep() -> None:
    """The owner skipped its parked gate as the run stopped (the row keeps what it waited
    for), then died before its walk told it: the sweep finishing the walk tells it."""
    h, _, _, run_id = parked()
    lease = h.store.acquire_lock(f"zuke-run-{run_id}", LockHolder("alice", run_id, "t"), 1000)
    assert isinstance(lease, LockAcquired)

    def died(record: Any) -> RunDelta:
        rows = {n: replace(r, status="skipped", error="cancelled by carol")
                for n, r in record.targets.items() if r.status == "waiting"}  # fmt: skip
        return RunDelta(updated_at=record.updated_at, status="cancelling", targets=rows,
                        intended_terminal="cancelled",
                        locks={f"zuke-run-{run_id}": lease.token})  # fmt: skip

    update_run(h.store, run_id, died)
    assert all(h.record(run_id).targets[g].waiting_for is not None for g in ("e2e", "perf"))
    h.clock.advance(1001)
    [entry] = h.sweep(actor="sweeper").entries
    assert (entry.action, entry.result) == ("reaped", "cancelled")
    assert [(g, a) for g, a, *_ in told(h, run_id)] == [("e2e", "sweeper"), ("perf", "sweeper")]
