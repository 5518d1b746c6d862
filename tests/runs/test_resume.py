"""``resume_run``: signals, exactly-once, the checks before a resume, and what a resume runs."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.runs.support import HOUR, Harness, RecordingStore, approval, release_build
from zuke import (
    AlreadyResumedError,
    Build,
    DegradedRecordError,
    GraphChangedError,
    LockHolder,
    RunNotFoundError,
    RunNotSuspendedError,
    Signal,
    external_signal,
    parameter,
    target,
)
from zuke._clock import ManualClock, iso
from zuke._target import TargetBuilder
from zuke.runs.resume import SignalDelivery, check_signal
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta
from zuke.state.update import update_run
from zuke.state.wire import dumps_record


def suspended(**kwargs: Any) -> tuple[Harness, list[Any], str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(release_build(store, calls, **kwargs), store, clock)
    result = h.start()
    assert result.status == "suspended"
    calls.clear()
    return h, calls, result.run_id


def test_the_signals_payload_reaches_the_dependent_as_a_signal_with_its_arrival_time() -> None:
    h, calls, run_id = suspended()
    h.clock.advance(5_000)
    outcome = h.resume(run_id, "approved", {"by": "qa"})
    assert (outcome.action, outcome.status, outcome.ok) == ("resumed", "succeeded", True)
    received = iso(h.clock.now_ms())
    [(name, signal, _repo)] = calls
    assert name == "promote" and isinstance(signal, Signal)
    assert (signal.data, signal.received_at) == ({"by": "qa"}, received)
    record = h.record(run_id)
    assert record.status == "succeeded"
    assert record.signals["approved"].data == {"by": "qa"}


def test_only_targets_that_did_not_succeed_run_on_resume() -> None:
    h, calls, run_id = suspended()
    h.resume(run_id, "approved", {})
    assert [c[0] if isinstance(c, tuple) else c for c in calls] == ["promote"]
    assert set(h.statuses(run_id).values()) == {"succeeded"}


def test_a_repeated_delivery_with_the_same_id_is_a_no_op() -> None:
    h, calls, run_id = suspended()
    first = h.resume(run_id, "approved", {"by": "qa"}, signal_id="webhook-1")
    before = h.store.get_run(run_id)
    again = h.resume(run_id, "approved", {"by": "someone else"}, signal_id="webhook-1")
    assert first.action == "resumed"
    assert (again.action, again.ok, again.status) == ("already-delivered", True, "succeeded")
    assert "already delivered" in again.notes[0]
    assert h.store.get_run(run_id) == before  # nothing written
    assert len(calls) == 1


def test_the_default_signal_id_is_a_hash_of_name_and_data() -> None:
    one = SignalDelivery("approved", {"by": "qa", "n": 1})
    same = SignalDelivery("approved", {"n": 1, "by": "qa"})
    text = json.dumps(["approved", {"by": "qa", "n": 1}], sort_keys=True, separators=(",", ":"))
    assert one.key() == same.key() == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert SignalDelivery("approved", {"by": "ops"}).key() != one.key()
    assert SignalDelivery("other", {"by": "qa", "n": 1}).key() != one.key()
    assert SignalDelivery("approved", 1, id="mine").key() == "mine"


def test_the_same_signal_delivered_twice_without_an_id_is_a_no_op_the_second_time() -> None:
    h, _calls, run_id = suspended()
    h.resume(run_id, "approved", {"by": "qa"})
    assert h.resume(run_id, "approved", {"by": "qa"}).action == "already-delivered"
    with pytest.raises(RunNotSuspendedError, match='is "succeeded", not suspended'):
        h.resume(run_id, "approved", {"by": "ops"})  # other data: another signal


def test_a_signal_no_gate_waits_for_is_refused_naming_the_awaited_ones_and_not_stored() -> None:
    from zuke._errors import UnknownSignalError, UsageError

    h, calls, run_id = suspended()
    before = h.store.get_run(run_id)
    with pytest.raises(UnknownSignalError, match="its gates wait for 'approved'") as caught:
        h.resume(run_id, "typo", {"x": 1})
    assert isinstance(caught.value, UsageError)  # exit 2: a typo, not a failure
    assert h.store.get_run(run_id) == before and calls == []


def test_signal_data_that_is_not_json_or_too_big_is_refused_before_anything_is_read() -> None:
    from zuke import SignalRefusedError

    with pytest.raises(SignalRefusedError, match="not JSON"):
        check_signal(SignalDelivery("a", {1, 2}))
    with pytest.raises(SignalRefusedError, match="the limit is 65536"):
        check_signal(SignalDelivery("a", "x" * 65_536))
    check_signal(SignalDelivery("a", "x" * 65_000))


def test_an_unknown_run_id_is_refused() -> None:
    h, _, _ = suspended()
    with pytest.raises(RunNotFoundError, match='no run "nope"'):
        h.resume("nope", "approved")


def test_a_run_that_is_not_suspended_is_refused_naming_its_status() -> None:
    h, _, run_id = suspended()
    h.resume(run_id, "approved")
    with pytest.raises(RunNotSuspendedError) as caught:
        h.resume(run_id)
    assert caught.value.status == "succeeded"
    assert f'run {run_id} is "succeeded", not suspended' in str(caught.value)


def test_a_running_run_is_already_resumed() -> None:
    h, _, run_id = suspended()
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    with pytest.raises(AlreadyResumedError, match="is running"):
        h.resume(run_id)


def test_a_signal_for_a_running_run_is_stored_for_its_owner_and_answers_delivered() -> None:
    h, _, run_id = suspended()
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    outcome = h.resume(run_id, "approved", {"by": "qa"})
    assert outcome.action == "delivered" and outcome.ok
    assert "takes the stored signal" in outcome.notes[-1]
    assert h.record(run_id).signals["approved"].data == {"by": "qa"}


def test_a_resumer_that_finds_the_lease_held_gets_already_resumed_and_changes_nothing() -> None:
    h, calls, run_id = suspended()
    other = LockHolder("bob", run_id, iso(h.clock.now_ms()))
    h.store.acquire_lock(f"zuke-run-{run_id}", other, 60_000)
    before = h.store.get_run(run_id)
    with pytest.raises(AlreadyResumedError, match="being resumed by bob") as caught:
        h.resume(run_id)
    assert caught.value.by == "bob"
    assert h.store.get_run(run_id) == before and calls == []


def test_a_signal_whose_run_is_held_is_stored_and_left_to_the_holder() -> None:
    h, calls, run_id = suspended()
    other = LockHolder("bob", run_id, iso(h.clock.now_ms()))
    h.store.acquire_lock(f"zuke-run-{run_id}", other, 60_000)
    outcome = h.resume(run_id, "approved")
    assert outcome.action == "delivered" and outcome.ok
    assert "being resumed by bob" in outcome.notes[-1]
    record = h.record(run_id)
    assert record.status == "suspended" and "approved" in record.signals and calls == []


class LosingStore(RecordingStore):
    """Another resumer wins the compare-and-swap just after this one took the lease."""

    def acquire_lock(self, key: str, *args: Any, **kwargs: Any) -> Any:
        taken = super().acquire_lock(key, *args, **kwargs)
        if key.startswith("zuke-run-") and not any(c == ("sneak", key) for c in self.calls):
            self.calls.append(("sneak", key))
            update_run(
                self.inner,
                key.removeprefix("zuke-run-"),
                lambda r: RunDelta(updated_at=r.updated_at, status="running", actor="bob"),
            )
        return taken


def test_the_loser_of_the_compare_and_swap_gets_already_resumed_and_gives_the_lease_back() -> None:
    h, calls, run_id = suspended()
    losing = LosingStore(h.store)
    with pytest.raises(AlreadyResumedError, match="by bob"):
        Harness(h.build, losing, h.clock).resume(run_id)
    assert [c for c in losing.calls if c[0] != "sneak"] == [
        ("acquire", f"zuke-run-{run_id}:LockAcquired"),
        ("release", f"zuke-run-{run_id}"),
    ]
    assert calls == [] and h.store.list_locks() == []


def test_the_lease_is_taken_before_the_record_leaves_suspended_and_released_at_the_end() -> None:
    h, _, run_id = suspended()
    recording = RecordingStore(h.store)
    Harness(h.build, recording, h.clock).resume(run_id, "approved")
    lease = f"zuke-run-{run_id}"
    kinds = [(k, w) for k, w in recording.calls if k != "write" or w != "-"]
    assert kinds[0] == ("acquire", f"{lease}:LockAcquired")
    assert kinds[1] == ("write", "running")
    assert kinds[-2:] == [("write", "succeeded"), ("release", lease)]
    assert h.store.list_locks() == []
    assert h.record(run_id).locks == {}


def test_the_lease_is_released_when_the_resumed_run_fails() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.approve).executes(lambda: 1 / 0)  # type: ignore[attr-defined]

    build = release_build(store, [], extra={"promote": target(promote)})
    h = Harness(build, store, clock)
    run_id = h.start().run_id
    recording = RecordingStore(store)
    outcome = Harness(build, recording, clock).resume(run_id, "approved")
    assert outcome.status == "failed" and not outcome.ok
    assert recording.calls[-1] == ("release", f"zuke-run-{run_id}")
    assert store.list_locks() == [] and h.record(run_id).status == "failed"


def test_the_lease_is_released_when_the_engine_raises_after_the_compare_and_swap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    h, _, run_id = suspended()

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("engine bug")

    monkeypatch.setattr("zuke.runs.continuation.execute_resumed", broken)
    with pytest.raises(RuntimeError, match="engine bug"):
        h.resume(run_id, "approved")
    assert h.store.list_locks() == []


def drifted(store: MemoryStateStore, calls: list[Any]) -> type[Build]:
    def smoke(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: calls.append("smoke"))

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.approve, self.smoke).executes(  # type: ignore[attr-defined]
            lambda: calls.append("promote")
        )

    return release_build(store, calls, extra={"smoke": target(smoke), "promote": target(promote)})


def test_a_changed_graph_is_refused_naming_the_drift_and_nothing_is_written() -> None:
    h, calls, run_id = suspended()
    before = h.store.get_run(run_id)
    with pytest.raises(GraphChangedError) as caught:
        h.resume(run_id, "approved", build=drifted(h.store, calls))  # type: ignore[arg-type]
    message = str(caught.value)
    assert "smoke was added" in message and "promote now depends on approve, smoke" in message
    assert "--force-graph" in message
    assert h.store.get_run(run_id) == before and h.store.list_locks() == []


def test_force_graph_resumes_with_the_build_as_it_is_now() -> None:
    h, calls, run_id = suspended()
    build = drifted(h.store, calls)  # type: ignore[arg-type]
    outcome = h.resume(run_id, "approved", build=build, force_graph=True)
    assert outcome.status == "succeeded"
    assert calls == ["smoke", "promote"]


def test_a_degraded_record_is_refused_unless_resume_degraded() -> None:
    h, calls, run_id = suspended()
    update_run(h.store, run_id, lambda r: RunDelta(updated_at=r.updated_at, degraded=True))
    with pytest.raises(DegradedRecordError, match="--resume-degraded"):
        h.resume(run_id, "approved")
    assert h.record(run_id).status == "suspended" and calls == []
    assert h.resume(run_id, "approved", resume_degraded=True).status == "succeeded"


def test_a_non_secret_parameter_may_be_overridden_on_resume() -> None:
    h, calls, run_id = suspended()
    h.resume(run_id, "approved", params={"repo": ["web"]})
    assert calls[0][2] == "web"
    assert h.record(run_id).params["repo"] == "web"  # recorded: the run goes on with it


def test_an_override_is_recorded_so_a_later_resume_keeps_it() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    seen: list[Any] = []

    class TwoStops(Build):
        repo = parameter("repo").default("api")

        def state_store(self) -> MemoryStateStore:
            return store

        @target
        def qa(self, t: TargetBuilder) -> TargetBuilder:
            return t.waits_for(lambda s: s.on(external_signal("qa")))

        @target
        def prod(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.qa).waits_for(lambda s: s.on(external_signal("prod")))

        @target
        def ship(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.prod).executes(lambda: seen.append(self.repo.value))

    h = Harness(TwoStops, store, clock)
    run_id = h.start("ship").run_id
    assert h.resume(run_id, "qa", params={"repo": ["web"]}).status == "suspended"
    assert h.resume(run_id, "prod").status == "succeeded"
    assert seen == ["web"]


def secret_build(store: MemoryStateStore, seen: list[Any]) -> type[Build]:
    class Secretive(Build):
        token = parameter("deploy token").secret()

        def state_store(self) -> MemoryStateStore:
            return store

        @target
        def approve(self, t: TargetBuilder) -> TargetBuilder:
            return t.waits_for(lambda s: s.on(external_signal("go")))

        @target
        def promote(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.approve).executes(lambda: seen.append(self.token.value))

    return Secretive


def test_secrets_come_from_the_environment_again_and_never_reach_the_record() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    seen: list[Any] = []
    h = Harness(secret_build(store, seen), store, clock, env={"TOKEN": "first-secret-value"})
    run_id = h.start("promote").run_id
    h.env["TOKEN"] = "second-secret-value"
    h.resume(run_id, "go", {"note": "ok"})
    assert seen == ["second-secret-value"]
    text = dumps_record(h.record(run_id))
    assert "first-secret-value" not in text and "second-secret-value" not in text
    assert "token" not in h.record(run_id).params


def two_gates(store: MemoryStateStore, calls: list[Any]) -> type[Build]:
    def first(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.waits_for(lambda s: s.on(external_signal("qa")))

    def middle(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.first).executes(lambda: calls.append("middle"))  # type: ignore[attr-defined]

    def second(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.middle).waits_for(lambda s: s.on(external_signal("prod")))  # type: ignore[attr-defined]

    def last(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.second).executes(  # type: ignore[attr-defined]
            lambda ctx: calls.append(("last", sorted(ctx.signals)))
        )

    members = {f.__name__: target(f) for f in (first, middle, second, last)}
    return type("TwoGates", (Build,), {**members, "state_store": lambda self: store})


def test_a_resumed_run_may_suspend_again_at_a_later_gate() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    calls: list[Any] = []
    h = Harness(two_gates(store, calls), store, clock)
    run_id = h.start("last").run_id
    again = h.resume(run_id, "qa")
    assert again.status == "suspended" and calls == ["middle"]
    assert h.statuses(run_id) == {
        "first": "succeeded", "middle": "succeeded", "second": "waiting", "last": "pending",
    }  # fmt: skip
    assert h.resume(run_id, "prod").status == "succeeded"
    assert calls == ["middle", ("last", ["prod", "qa"])]


def test_the_resumer_is_recorded_in_its_events_and_the_starter_stays_the_actor() -> None:
    h, _, run_id = suspended()
    starter = h.record(run_id).actor
    h.resume(run_id, "approved", actor="qa-lead")
    record = h.record(run_id)
    assert record.actor == starter != "qa-lead"
    [event] = [e for e in record.events if e.tool == "resume"]
    [signal] = [e for e in record.events if e.tool == "signal"]
    assert event.actor == "qa-lead" and signal.actor == "qa-lead"
    assert signal.args["signal"] == "approved"


def test_the_run_deadline_is_pushed_forward_by_the_time_it_was_parked() -> None:
    h, _, run_id = suspended(deadline="45m")
    created = h.clock.now_ms()
    assert h.record(run_id).deadline_at == iso(created + 45 * 60_000)
    h.clock.advance(10 * HOUR)
    assert h.resume(run_id, "approved").status == "succeeded"
    assert h.record(run_id).deadline_at == iso(created + 45 * 60_000 + 10 * HOUR)


def test_a_deadline_is_pushed_by_each_park_not_by_the_whole_age() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    h = Harness(two_gates(store, []), store, clock)

    def deadline(self: Build) -> str:
        return "1h"

    h.build.deadline = deadline  # type: ignore[method-assign]
    start = clock.now_ms()
    run_id = h.start("last").run_id
    clock.advance(3 * HOUR)
    h.resume(run_id, "qa")  # parked 3h, suspends again at once
    clock.advance(2 * HOUR)
    h.resume(run_id, "prod")  # parked 2h more
    assert h.record(run_id).deadline_at == iso(start + HOUR + 5 * HOUR)


def test_a_signal_delivered_with_no_gate_waiting_for_signals_gets_no_misleading_note() -> None:
    h, _calls, run_id = suspended(gate=approval(timeout=None))
    outcome = h.resume(run_id, "approved")
    assert outcome.notes == [] and outcome.status == "succeeded"


def test_a_delivery_whose_run_another_process_ended_before_its_lease_is_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the simulation's race scenarios (a watcher beside a slow continuation): the
    signal is stored, the run is due, and before the deliverer takes the lease a watcher
    resumes the run and takes it to its end. The delivery said "not suspended" and failed
    (exit 1) although its signal was stored and consumed; it is delivered, nothing to do
    (as ``continue_due`` since ``bdd1d0e``)."""
    import asyncio

    import zuke.runs.resume as resume

    h, calls, run_id = suspended()
    original = resume.continue_run
    watched: list[Any] = []

    async def watcher_first(*args: Any, **kwargs: Any) -> Any:
        if not watched:  # the watcher's sweep: the signal is due, the run ends
            watched.append(await asyncio.to_thread(h.sweep, run_id))
        return await original(*args, **kwargs)

    monkeypatch.setattr(resume, "continue_run", watcher_first)
    outcome = h.resume(run_id, "approved", {"by": "qa"})
    assert (outcome.action, outcome.status) == ("delivered", "succeeded")
    assert "nothing to do" in outcome.notes[-1]
    assert h.record(run_id).signals["approved"].data == {"by": "qa"}
    assert [c[0] for c in calls] == ["promote"]  # once, by the watcher
