"""A run-held lock (``s.held_until(target)``) on every store: memory, filesystem, ``zuke
serve`` (SQLite), Postgres and the GitHub branch store (fake GitHub).

The release engineer's case: ``deploy`` (locks ``env-staging`` until ``promote``) →
``qa`` (a gate) → ``promote``. The lock outlives ``deploy``'s body and the suspension,
is adopted by the process that resumes the run, and is given back on every way out:
success, failure, cancel (after compensations), a timeout's disposition, a gate's
``on_failure``, a reap past the deadline. A second release meets the conflict guidance
naming the waiting run and its gate. Gate deadlines are judged by the run's (manual)
clock; nothing here waits for a store's clock.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_support import PgCluster
from tests.runs.support import HOUR, Harness
from zuke import (
    Build,
    LockAcquired,
    LockHolder,
    NotYet,
    Satisfied,
    WaitContext,
    WaitFailed,
    WaitTrigger,
    external_signal,
    parameter,
    target,
)
from zuke._clock import ManualClock
from zuke._target import TargetBuilder
from zuke.runs.cancel import cancel_run
from zuke.state._protocol import StateStore, lease_key
from zuke.state.records import HeldLock

KEY = "env-staging"
MINUTE = 60_000
STORES = ["memory", "filesystem", "serve", "postgres", "github"]


@pytest.fixture(scope="module")
def serve_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.serve.support import running_server

    with running_server(tmp_path_factory.mktemp("held-serve")) as server:
        yield server.url


@pytest.fixture(scope="module")
def held_db(pg_cluster: PgCluster) -> str:
    """The Postgres stores' database: one for the module (issue 28 §7: a database is a
    ``CREATE DATABASE`` and a migration of the server's CPU), already migrated."""
    return pg_cluster.create_database(migrated=True)


@pytest.fixture(scope="module")
def fake_gh() -> Iterator[Any]:
    from fixtures.fake_github import FakeGitHub
    from tests.gh.branch_support import REPO, UNLIMITED

    with FakeGitHub.start(clock=ManualClock(), repos=[REPO], **UNLIMITED) as gh:
        yield gh


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    kind = request.param
    closing: list[Any] = []
    made: StateStore
    if kind == "memory":
        from zuke.state.memory import MemoryStateStore

        made = MemoryStateStore()
    elif kind == "filesystem":
        from zuke.state.filesystem import FileSystemStateStore

        made = FileSystemStateStore(tmp_path / "runs")
    elif kind == "serve":
        from tests.serve.support import TOKEN
        from zuke.state.http import HttpStateStore

        url = request.getfixturevalue("serve_url")
        made = HttpStateStore(f"{url}/held/{uuid.uuid4().hex[:12]}", token=TOKEN)
        closing.append(made)
    elif kind == "postgres":
        from zuke.state.postgres import PostgresStateStore

        # a namespace of the module's database, as the serve stores are prefixes of one
        # server: a namespace is a store of its own, and the database is not the subject
        url = request.getfixturevalue("held_db")
        made = PostgresStateStore(url, namespace=f"held-{uuid.uuid4().hex[:12]}")
        closing.append(made)
    else:
        from tests.gh.branch_support import branch_store

        made = branch_store(
            request.getfixturevalue("fake_gh"), branch=f"zuke-held-{uuid.uuid4().hex[:8]}"
        )
        closing.append(made)
    yield made
    for c in closing:
        c.close()


def release_build(
    store: StateStore,
    calls: list[Any],
    *,
    gate: Callable[[Any], Any] | None = None,
    promote_fails: bool = False,
    promote_locks: bool = False,
    compensate: bool = False,
    deadline: str | None = None,
    rollback: bool = False,
) -> type[Build]:
    """``deploy`` (env-staging, held until ``promote``) → ``qa`` (gate) → ``promote``."""

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            calls.append(("deploy", self.version.value, ctx.lock.fence))  # type: ignore[attr-defined]

        t = t.lock(lambda s: s.lock_key("env", "staging").with_ttl("10m").held_until(self.promote))  # type: ignore[attr-defined]
        if compensate:
            t = t.on_cancel(self.undeploy)  # type: ignore[attr-defined]
        return t.executes(body)

    def qa(self: Build, t: TargetBuilder) -> TargetBuilder:
        configure = gate or (lambda s: s.on(external_signal("approved")).timeout("1h"))
        if rollback:
            configure = lambda s: (  # noqa: E731
                s.on(external_signal("approved")).timeout("1h").on_timeout(self.rollback)  # type: ignore[attr-defined]
            )
        return t.depends_on(self.deploy).waits_for(configure)  # type: ignore[attr-defined]

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            calls.append(("promote", self.version.value, ctx.lock.fence if ctx.lock else None))  # type: ignore[attr-defined]
            if promote_fails:
                raise RuntimeError("promote broke")

        if promote_locks:
            t = t.lock(lambda s: s.lock_key("env", "staging").with_ttl("10m"))
        return t.depends_on(self.qa).executes(body)  # type: ignore[attr-defined]

    def undeploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: calls.append(("undeploy", self.version.value)))  # type: ignore[attr-defined]

    def rollback_target(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: calls.append(("rollback", holders(store))))

    namespace: dict[str, Any] = {
        "version": parameter("the build").default("1"),
        "state_store": lambda self: store,
        "deadline": lambda self: deadline,
        "deploy": target(deploy),
        "qa": target(qa),
        "promote": target(promote),
        "undeploy": target(undeploy),
        "rollback": target(rollback_target),
    }
    return type("Release", (Build,), namespace)


def harness(store: StateStore, calls: list[Any], **kwargs: Any) -> Harness:
    return Harness(release_build(store, calls, **kwargs), store, ManualClock())


def store_now(store: StateStore) -> int:
    """The store's clock now (an upper bound): a probe lock's expiry less its TTL."""
    taken = store.acquire_lock(f"probe-{uuid.uuid4().hex[:8]}", LockHolder("t", "t", "t"), 1000)
    assert isinstance(taken, LockAcquired)
    [entry] = [e for e in store.list_locks() if e.holder.run_id == "t"]
    store.release_lock(entry.key, taken.token)
    return entry.expires_at - 1000


def holders(store: StateStore) -> dict[str, str]:
    """Who holds which key, leases aside."""
    return {e.key: e.holder.run_id for e in store.list_locks() if not e.key.startswith("zuke-")}


def parked(h: Harness, version: str = "1") -> str:
    result = h.start("promote", params={"version": [version]})
    assert result.status == "suspended", result.stop_reason
    return result.run_id


def resumed_by(h: Harness, run_id: str, way: str) -> str:
    """The run's status after ``zuke resume`` (way "resume") or one sweep's result for it."""
    if way == "resume":
        return h.resume(run_id).status
    [entry] = h.sweep().entries
    return entry.result


def test_the_lock_outlives_its_body_and_the_suspension_and_is_released_after_promote(
    store: StateStore,
) -> None:
    calls: list[Any] = []
    h = harness(store, calls)
    run_id = parked(h)
    record = h.record(run_id)
    assert record.status == "suspended"
    assert holders(store) == {KEY: run_id}  # kept across the gate: nobody heartbeats it
    assert set(record.locks) == {KEY}  # the lease given back, the kept lock's token kept
    assert record.held[KEY] == HeldLock(target="deploy", until="promote", ttl_ms=600_000,
                                        fence=calls[0][2])  # fmt: skip
    [entry] = [e for e in store.list_locks() if e.key == KEY]
    # Past the gate's 1h deadline plus the lock's 10m TTL, by the store's clock.
    assert (
        HOUR + 10 * MINUTE - 5 * MINUTE < entry.expires_at - store_now(store) <= HOUR + 10 * MINUTE
    )

    outcome = h.resume(run_id, "approved", {"by": "qa"})
    assert outcome.status == "succeeded"
    assert calls[1] == ("promote", "1", None)
    assert holders(store) == {}
    final = h.record(run_id)
    assert final.locks == {} and final.held == {}


def test_a_second_release_is_refused_naming_the_waiting_run_and_its_gate(
    store: StateStore,
) -> None:
    calls: list[Any] = []
    h = harness(store, calls)
    first = parked(h, "1")
    second = h.start("promote", params={"version": ["2"]})
    assert second.status == "failed"
    error = h.record(second.run_id).targets["deploy"].error or ""
    assert f'Lock "{KEY}" is held by' in error and f"run {first}" in error
    assert f"held by run {first}, suspended at gate `qa` since" in error
    assert "until `promote` has finished" in error
    assert [c[0] for c in calls] == ["deploy"]  # the second deploy never ran
    assert holders(store) == {KEY: first}
    # The first promotes; then the second release goes through.
    assert h.resume(first, "approved", {}).status == "succeeded"
    assert parked(h, "2") and holders(store)[KEY] != first


def test_promote_that_fails_releases_it(store: StateStore) -> None:
    calls: list[Any] = []
    h = harness(store, calls, promote_fails=True)
    run_id = parked(h)
    assert h.resume(run_id, "approved", {}).status == "failed"
    assert holders(store) == {} and h.record(run_id).held == {}


def test_promote_that_locks_the_same_key_runs_under_the_runs_hold(store: StateStore) -> None:
    calls: list[Any] = []
    h = harness(store, calls, promote_locks=True)
    run_id = parked(h)
    assert h.resume(run_id, "approved", {}).status == "succeeded"
    assert calls[1] == ("promote", "1", calls[0][2])  # the same fence: the same claim
    assert holders(store) == {}


def test_cancel_releases_it_after_the_compensations(store: StateStore) -> None:
    calls: list[Any] = []
    h = harness(store, calls, compensate=True)
    run_id = parked(h)
    build = h.build
    seen: list[dict[str, str]] = []
    original = store.release_lock

    def spy(key: str, token: str) -> None:
        if key == KEY:
            seen.append({"calls": str(calls)})
        original(key, token)

    store.release_lock = spy  # type: ignore[method-assign]
    try:
        result = cancel_run(store, run_id, actor="ops", build=build, env={})
    finally:
        del store.release_lock
    assert result.status == "cancelled"
    assert ("undeploy", "1") in calls
    assert seen and "undeploy" in seen[0]["calls"]  # given back after the compensation ran
    assert KEY in result.released and holders(store) == {}
    record = h.record(run_id)
    assert record.locks == {} and record.held == {}


@pytest.mark.parametrize("disposition", ["fail", "cancel-run"])
@pytest.mark.parametrize("way", ["resume", "sweep"])
def test_a_timeout_disposition_releases_it(store: StateStore, disposition: str, way: str) -> None:
    calls: list[Any] = []
    gate = lambda s: s.on(external_signal("approved")).timeout("1h").on_timeout(disposition)  # noqa: E731
    h = harness(store, calls, gate=gate)
    run_id = parked(h)
    h.clock.advance(HOUR + 1)
    status = resumed_by(h, run_id, way)
    assert status == ("failed" if disposition == "fail" else "cancelled")
    assert holders(store) == {}
    record = h.record(run_id)
    assert record.locks == {} and record.held == {}


class FailLater(WaitTrigger):
    """Not yet, until the test says QA denied it."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    @property
    def descriptor(self) -> str:
        return "fail-later"

    def check(self, ctx: WaitContext) -> NotYet | WaitFailed:
        return WaitFailed("QA said no") if self.fail else NotYet()


@pytest.mark.parametrize("way", ["resume", "sweep"])
def test_a_timeout_into_a_rollback_target_releases_it_after_the_rollback(
    store: StateStore, way: str
) -> None:
    calls: list[Any] = []
    h = harness(store, calls, rollback=True, compensate=True)
    run_id = parked(h)
    h.clock.advance(HOUR + 1)
    status = resumed_by(h, run_id, way)
    assert status == "cancelled"
    assert ("rollback", {KEY: run_id}) in calls  # the rollback ran while the run kept it
    assert ("undeploy", "1") in calls
    assert holders(store) == {} and h.record(run_id).held == {}


@pytest.mark.parametrize("way", ["resume", "sweep"])
def test_a_timeout_whose_rollback_cannot_start_says_so_and_fails(
    store: StateStore, way: str
) -> None:
    """The run's held lock lapsed and was taken while it was parked: the rollback must not
    run unguarded, and the report says what happened — not "ran rollback and cancelled"."""
    calls: list[Any] = []
    h = harness(store, calls, rollback=True)
    run_id = parked(h)
    store.break_lock(KEY)
    taken = store.acquire_lock(KEY, LockHolder("bob", "other-run", "now"), 60_000)
    assert isinstance(taken, LockAcquired)
    h.clock.advance(HOUR + 1)
    if way == "resume":
        outcome = h.resume(run_id)
        status, said, ok = outcome.status, "; ".join(outcome.notes), outcome.ok
    else:
        report = h.sweep()
        [entry] = report.entries
        status, said, ok = entry.result, entry.detail or "", report.ok
        assert (entry.action, entry.handled) == ("timed-out", False)
    assert status == "failed" and not ok  # the disposition could not do its job: exit 1
    assert ("rollback", {KEY: "other-run"}) not in calls and not any(
        c[0] == "rollback" for c in calls
    )
    assert "ran rollback" not in said and "cancelled the run" not in said
    assert "rollback did not run" in said and f'lock "{KEY}"' in said
    assert said.endswith("the run is failed")
    assert h.record(run_id).status == "failed"
    assert holders(store) == {KEY: "other-run"}  # the new holder's claim is left alone


@pytest.mark.parametrize("where", ["in-process", "sweep"])
def test_a_gate_on_failure_releases_it(store: StateStore, where: str) -> None:
    calls: list[Any] = []
    trigger = FailLater(fail=where == "in-process")
    h = harness(store, calls, gate=lambda s: s.on(trigger).timeout("1h").on_failure("fail"))
    result = h.start("promote")
    if where == "sweep":
        assert result.status == "suspended" and holders(store) == {KEY: result.run_id}
        trigger.fail = True
        [entry] = h.sweep().entries
        assert entry.result == "failed"
    else:
        assert result.status == "failed"
    assert holders(store) == {}
    record = h.record(result.run_id)
    assert record.status == "failed" and record.held == {} and record.locks == {}


def test_a_lock_broken_while_suspended_fails_the_resume_before_promote_runs(
    store: StateStore,
) -> None:
    calls: list[Any] = []
    h = harness(store, calls)
    run_id = parked(h)
    store.break_lock(KEY)
    taken = store.acquire_lock(KEY, LockHolder("bob", "other-run", "now"), 60_000)
    outcome = h.resume(run_id, "approved", {})
    assert outcome.status == "failed"
    assert [c[0] for c in calls] == ["deploy"]  # promote never ran unguarded
    record = h.record(run_id)
    assert record.targets["promote"].status == "skipped"
    error = record.targets["qa"].error or ""  # the first target the resumed run reached
    assert f'lock "{KEY}"' in error and "no longer this run's" in error
    assert outcome.result is not None and outcome.result.stop_reason == error
    assert holders(store) == {KEY: "other-run"}  # the new holder's claim is left alone
    assert taken is not None


def test_a_reap_past_the_deadline_releases_it(store: StateStore) -> None:
    """The run's process died while it ran (its lease lapsed); a sweep past the run's
    deadline settles it failed and gives the kept lock back."""
    calls: list[Any] = []
    h = harness(store, calls, deadline="2h")
    run_id = parked(h)
    # Resume into promote, then make it look like a crash mid-run: running, lease lapsed.
    from zuke.state.records import RunDelta
    from zuke.state.update import update_run

    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    h.clock.advance(3 * HOUR)
    report = h.sweep()
    assert any(e.run_id == run_id for e in report.entries) or report
    record = h.record(run_id)
    assert record.status == "failed", record.status
    assert holders(store) == {} and record.held == {}
    assert lease_key(run_id) not in record.locks


def test_a_reaped_run_goes_back_to_suspended_keeping_it_and_its_resume_adopts_it(
    store: StateStore,
) -> None:
    """The resumed run's process died (its lease lapsed, the run still ``running``): the
    reaper puts it back to ``suspended`` with the lock still the run's — a new token and
    fence, to outlast the gate — and the next resume adopts it."""
    from zuke.state.records import RunDelta
    from zuke.state.update import update_run

    calls: list[Any] = []
    h = harness(store, calls)
    run_id = parked(h)
    before = h.record(run_id)
    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    h.sweep()
    record = h.record(run_id)
    assert record.status == "suspended"
    assert KEY in record.locks and KEY in record.held and holders(store) == {KEY: run_id}
    # A new token and a higher fence: the gone owner may be stalled, not dead, and must
    # find its renewal refused, and its stale fence refused by the resource.
    assert record.locks[KEY] != before.locks[KEY]
    assert record.held[KEY].fence > before.held[KEY].fence
    assert store.renew_lock(KEY, before.locks[KEY], 60_000) is False
    assert h.resume(run_id, "approved", {}).status == "succeeded"
    assert calls[-1][0] == "promote" and holders(store) == {}


def test_a_live_owner_cancelled_releases_it_after_its_compensations() -> None:
    """Cancelled in its own process (Ctrl-C, or ``zuke cancel`` seen by the owner) between
    deploy and promote: the owner walks the compensations, then gives the lock back."""
    from zuke._engine.run import RunOptions, execute_async
    from zuke.state.memory import MemoryStateStore

    store = MemoryStateStore()
    order: list[str] = []
    original = store.release_lock

    def spy(key: str, token: str) -> None:
        if key == KEY:
            order.append("released")
        original(key, token)

    store.release_lock = spy  # type: ignore[method-assign]

    async def go() -> Any:
        cancel = asyncio.Event()

        class Release(Build):
            def state_store(self) -> StateStore:
                return store

            @target
            def deploy(self, t: TargetBuilder) -> TargetBuilder:
                lock = lambda s: s.key(KEY).with_ttl("10m").held_until(self.promote)  # noqa: E731
                return (
                    t.lock(lock).on_cancel(self.undeploy).executes(lambda: order.append("deploy"))
                )

            @target
            def soak(self, t: TargetBuilder) -> TargetBuilder:
                async def body() -> None:
                    order.append("soak")
                    cancel.set()
                    await asyncio.Event().wait()  # until cancelled

                return t.depends_on(self.deploy).executes(body)

            @target
            def promote(self, t: TargetBuilder) -> TargetBuilder:
                return t.depends_on(self.soak).executes(lambda: order.append("promote"))

            @target
            def undeploy(self, t: TargetBuilder) -> TargetBuilder:
                return t.executes(lambda: order.append("undeploy"))

        return await execute_async(Release, RunOptions(targets=["promote"], env={}, cancel=cancel))

    result = asyncio.run(go())
    assert result.status == "cancelled"
    assert order == ["deploy", "soak", "undeploy", "released"]
    assert holders(store) == {}
    found = store.get_run(result.run_id)
    assert found is not None and found.record.held == {} and found.record.locks == {}


def test_a_lock_lost_between_its_targets_stops_the_run_before_promote() -> None:
    """Broken (``--force``) while the run goes on between deploy and promote: the next
    renewal is refused, the run stops, promote never runs unguarded."""
    from zuke.state.memory import MemoryStateStore

    store = MemoryStateStore()
    order: list[str] = []

    class Release(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            lock = lambda s: s.key(KEY).with_ttl("1s").held_until(self.promote)  # noqa: E731
            return t.lock(lock).executes(lambda: order.append("deploy"))

        @target
        def soak(self, t: TargetBuilder) -> TargetBuilder:
            def body(ctx: Any) -> None:
                store.break_lock(KEY)
                order.append("broken")
                assert ctx.cancelled.wait(20), "the run was not stopped"  # a deadline, no sleep
                order.append("told to stop")

            return t.depends_on(self.deploy).executes(body)

        @target
        def promote(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.soak).executes(lambda: order.append("promote"))

    from zuke import execute

    result = execute(Release, ["promote"], env={})
    assert result.status == "failed"
    assert order == ["deploy", "broken", "told to stop"]
    assert result.stop_reason is not None
    assert f'lock "{KEY}", which the run keeps from `deploy` until `promote`' in result.stop_reason
    found = store.get_run(result.run_id)
    assert found is not None and found.record.held == {}  # the row left with the run's end
    # the record says why the run failed, not only the console (issue 25 §7: stated-reason)
    [stop] = [e for e in found.record.events if e.tool == "stop"]
    assert stop.outcome == "error" and stop.detail is not None
    assert f'lock "{KEY}", which the run keeps from `deploy` until `promote`' in stop.detail


class PassLater(WaitTrigger):
    """Not yet, until the test says QA passed it (a sweep then passes the gate)."""

    def __init__(self) -> None:
        self.ok = False

    @property
    def descriptor(self) -> str:
        return "pass-later"

    def check(self, ctx: WaitContext) -> NotYet | Satisfied:
        return Satisfied() if self.ok else NotYet()


def test_a_lock_held_until_a_gate_that_a_sweep_passes_is_given_back_before_what_follows(
    store: StateStore,
) -> None:
    trigger = PassLater()
    seen: list[dict[str, str]] = []

    class Release(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            lock = lambda s: s.key(KEY).with_ttl("10m").held_until(self.qa)  # noqa: E731
            return t.lock(lock).executes(lambda: None)

        @target
        def qa(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.deploy).waits_for(lambda s: s.on(trigger).timeout("1h"))

        @target
        def promote(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.qa).executes(lambda: seen.append(holders(store)))

    h = Harness(Release, store, ManualClock())
    result = h.start("promote")
    assert result.status == "suspended" and holders(store) == {KEY: result.run_id}
    trigger.ok = True
    h.sweep()
    assert h.record(result.run_id).status == "succeeded"
    assert seen == [{}]  # qa had finished: the run gave the lock back before promote ran
    assert holders(store) == {} and h.record(result.run_id).held == {}


def test_a_kept_lock_lost_keeps_its_row_until_the_runs_end_so_a_reaped_resume_fails_closed() -> (
    None
):
    """Issue 25 §7 (the simulation's seed 837): a stalled owner lost its kept lock, then
    landed one more write that dropped the lock's row from ``heldLocks``; the run was reaped
    and resumed with no kept lock, and ``promote`` ran unguarded. Lost, the lock's token
    leaves the record at once (nobody renews it) but its row stays until the run's end lands
    here — a resume that finds the row with no token fails the run."""
    import asyncio
    from types import SimpleNamespace

    from zuke._engine.held import Kept, RunHeldLocks
    from zuke.state.records import HeldLock

    notes: list[tuple[str, str, object]] = []
    writer = SimpleNamespace(
        note_lock=lambda key, token: notes.append(("lock", key, token)),
        note_held=lambda key, row: notes.append(("held", key, row)),
    )
    stops: list[str] = []
    locks = RunHeldLocks(None, writer, warn=lambda line: None, guards=lambda: None,  # type: ignore[arg-type,return-value]
                         on_lost=stops.append)  # fmt: skip
    claim = SimpleNamespace(key=KEY, lapsed="no renewal succeeded for 31 s")
    locks.kept[KEY] = Kept(HeldLock("deploy", "promote", 30_000, 1), claim)  # type: ignore[arg-type]
    locks._lost(claim)  # type: ignore[arg-type]
    assert notes == [("lock", KEY, None)]  # the token goes; the row stays
    assert stops and "the run stops" in stops[0]
    asyncio.run(locks.release())  # the run's end, in this process
    assert notes[-1] == ("held", KEY, None)


def test_a_reaper_that_lost_the_runs_lease_never_revokes_the_kept_lock(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 §7 (the simulation's seed 1397): a reaper stalled past its lease's TTL after
    taking a dead owner's run went on to hand the kept lock over — releasing the owner's
    token — on a lease another process may hold by then. The hand-over is made only on a
    lease proven now; a reaper that cannot prove it leaves the kept lock as it found it."""
    from zuke.runs import reap
    from zuke.state.records import RunDelta
    from zuke.state.update import update_run

    calls: list[Any] = []
    h = harness(store, calls)
    run_id = parked(h)
    before = h.record(run_id)
    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    real_take = reap.take  # type: ignore[attr-defined]  # the name reap looks up

    async def take_then_lose(*args: Any, **kwargs: Any) -> Any:
        hold = await real_take(*args, **kwargs)
        hold.claim.lost.set()  # a renewal refused while the reaper was stalled
        return hold

    monkeypatch.setattr(reap, "take", take_then_lose)
    h.sweep()
    assert h.record(run_id).status == "running"  # left for a sweep that holds the lease
    assert store.renew_lock(KEY, before.locks[KEY], 60_000) is True  # the token still works
    assert holders(store) == {KEY: run_id}
