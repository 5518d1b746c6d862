"""Failing closed, in process: a lock or lease that cannot be renewed stops what it guards
before the store can give it to someone else — an async body is cancelled, a sync body
ends the process (here ``children.end_process`` is replaced: tests/e2e has the real exit).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from zuke import (
    Build,
    Context,
    DurationError,
    LockHeld,
    LockHolder,
    StateStore,
    StoreUnavailableError,
    ZukeError,
    execute,
    target,
)
from zuke._engine import children
from zuke._engine.claims import lease_key, lease_ttl_ms
from zuke._engine.executor import RunningBodies
from zuke._engine.run import RunOptions, execute_async
from zuke.state.memory import MemoryStateStore

RIVAL = LockHolder(actor="rival", run_id="rival-run", since="2026-01-01T00:00:00.000Z")


class CutOff(MemoryStateStore):
    """Renewals of keys starting with ``prefix`` fail (the store cannot be reached) once
    ``down`` is set, until ``up`` is; a rival's acquisition goes through regardless."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.down = threading.Event()
        self.failed = threading.Event()
        self.recovered = threading.Event()
        self.up = threading.Event()

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        if key.startswith(self.prefix) and self.down.is_set() and not self.up.is_set():
            self.failed.set()
            raise StoreUnavailableError("state: cannot reach the state service")
        renewed = super().renew_lock(key, token, ttl_ms)
        if key.startswith(self.prefix) and self.up.is_set():
            self.recovered.set()
        return renewed

    def rival(self, key: str) -> object:
        """What another process trying ``key`` now would get (the store's own judgement)."""
        return super().acquire_lock(key, RIVAL, 60_000)


class Ended:
    """Stands in for ``children.end_process``: records the line and what a rival saw then."""

    def __init__(self, store: CutOff, key: str | None) -> None:
        self.store = store
        self.key = key
        self.lines: list[str] = []
        self.rival: list[object] = []
        self.called = threading.Event()

    def __call__(self, line: str, existing: frozenset[int] = frozenset()) -> None:
        self.lines.append(line)
        if self.key is not None:
            self.rival.append(self.store.rival(self.key))
        self.called.set()


def locked(store: CutOff, body: Any, ttl: str = "1s") -> type[Build]:
    class Locked(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("res").with_ttl(ttl)).executes(body)

        @target
        def after(self, t):
            return t.depends_on(self.deploy).executes(lambda: None)

    return Locked


def run(build: type[Build], env: dict[str, str] | None = None) -> tuple[Any, list[str]]:
    warnings: list[str] = []
    options = RunOptions(targets=["after"], env=env or {}, on_warning=warnings.append)
    return asyncio.run(execute_async(build, options)), warnings


def test_a_renewal_that_fails_and_recovers_before_the_stop_point_lets_the_run_go_on() -> None:
    store = CutOff("res")
    store.down.set()

    async def body() -> None:
        while not store.failed.is_set():
            await asyncio.sleep(0.01)
        store.up.set()  # back before the stop point (1.5 s after the last success)
        while not store.recovered.is_set():
            await asyncio.sleep(0.01)

    result, warnings = run(locked(store, body, ttl="2s"))
    assert result.ok, result.outcomes["deploy"].error
    assert any("renewing res failed" in w for w in warnings)


def test_an_async_body_is_cancelled_before_the_store_could_give_its_lock_away() -> None:
    store = CutOff("res")
    seen: list[object] = []

    async def body() -> None:
        store.down.set()
        try:
            await asyncio.Event().wait()  # only a stop ends this
        except asyncio.CancelledError:
            seen.append(store.rival("res"))  # the moment it is cancelled
            raise

    result, _ = run(locked(store, body))
    assert result.status == "failed"
    error = result.outcomes["deploy"].error or ""
    assert 'lock "res" was lost while this target ran: it could not be renewed' in error
    assert "cannot reach the state service" in error
    assert len(seen) == 1 and isinstance(seen[0], LockHeld)  # still the store's: no overlap
    assert result.outcomes["after"].status == "skipped"


def test_a_sync_body_under_a_lapsed_lock_ends_the_process_before_the_lock_expires(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = CutOff("res")
    ended = Ended(store, "res")
    monkeypatch.setattr(children, "end_process", ended)

    def body() -> None:  # not cooperative: only the end of the process would stop it
        store.down.set()
        assert ended.called.wait(10)

    result, _ = run(locked(store, body))
    (line,) = ended.lines
    assert line.startswith('lock "res" could not be renewed (no renewal succeeded for ')
    assert "cannot reach the state service" in line and "(exit 3)" in line
    assert isinstance(ended.rival[0], LockHeld)  # ended while the store still held it
    assert result.status == "failed"  # (the stand-in returned: the run stops as for a loss)


def test_a_sync_body_under_a_lapsed_lease_ends_the_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = CutOff("zuke-run-")
    ended = Ended(store, None)
    monkeypatch.setattr(children, "end_process", ended)
    run_ids: list[str] = []

    def body(ctx: Context) -> None:
        run_ids.append(ctx.run_id)
        store.down.set()
        assert ended.called.wait(10)
        ended.rival.append(store.rival(lease_key(ctx.run_id)))

    class Plain(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def after(self, t):
            return t.executes(body)

    result, _ = run(Plain, {"ZUKE_RUN_LEASE_TTL": "1s"})
    (line,) = ended.lines
    assert line.startswith(f"the lease of run {run_ids[0]} could not be renewed")
    assert "(exit 3)" in line and "for a sweep (zuke resume --check) to reap" in line
    assert isinstance(ended.rival[0], LockHeld)
    assert result.status == "failed"


def test_an_async_run_whose_lease_lapses_stops_and_leaves_its_record_for_the_sweep() -> None:
    store = CutOff("zuke-run-")
    cancelled: list[str] = []

    async def body() -> None:
        store.down.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append("body")
            raise

    class Plain(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def after(self, t):
            return t.executes(body)

    result, _ = run(Plain, {"ZUKE_RUN_LEASE_TTL": "1s"})
    assert result.status == "failed" and cancelled == ["body"]
    assert "its lease could not be renewed" in (result.stop_reason or "")
    assert "for a sweep (zuke resume --check) to reap" in (result.stop_reason or "")
    found = store.get_run(result.run_id)
    assert found is not None and found.record.status == "running"  # nothing more written


def test_a_lapsed_claim_shuts_its_scope_and_only_its_scope() -> None:
    bodies = RunningBodies()
    bodies.enter("r1", "fan[a].build", sync=True)
    bodies.enter("r1", "other", sync=False)
    assert bodies.close("r1", "fan") == (1, 0)  # a fan-out's lock guards its items' stages
    with pytest.raises(ZukeError, match="could not be renewed"):
        bodies.enter("r1", "fan[b].build", sync=True)
    bodies.enter("r1", "fanfare", sync=True)  # another target, even with the same prefix
    bodies.enter("r2", "fan", sync=True)  # another run
    assert bodies.close("r1", None) == (2, 1)  # the lease: every body of the run
    assert not bodies.wait_idle("r1", "fan", 0)
    bodies.leave("r1", "fan[a].build", sync=True)
    assert bodies.wait_idle("r1", "fan", 0)
    bodies.reopen("r1", "fan")
    bodies.reopen("r1", None)
    bodies.enter("r1", "fan[b].build", sync=True)


def test_a_waiter_for_idle_bodies_is_woken_when_the_last_one_leaves() -> None:
    """A body's leaving notifies only while someone waits (issue 28 §1): the waiter still
    wakes at once, not at its timeout."""
    import threading
    import time

    bodies = RunningBodies()
    bodies.enter("r1", "build", sync=True)
    bodies.leave("r1", "build", sync=True)  # nobody waits: nothing to notify
    bodies.enter("r1", "build", sync=True)
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(bodies.wait_idle("r1", None, 60)))
    waiter.start()
    deadline = time.monotonic() + 30
    while bodies._waiting == 0 and time.monotonic() < deadline:  # until it waits
        time.sleep(0.001)
    assert bodies._waiting == 1
    bodies.leave("r1", "build", sync=True)
    waiter.join(30)
    assert woke == [True] and bodies._waiting == 0


def test_a_lease_ttl_too_short_to_renew_is_refused_before_any_record() -> None:
    with pytest.raises(DurationError, match="ZUKE_RUN_LEASE_TTL: 50ms is shorter than the 1s"):
        lease_ttl_ms({"ZUKE_RUN_LEASE_TTL": "50ms"})
    assert lease_ttl_ms({"ZUKE_RUN_LEASE_TTL": "1s"}) == 1_000
    store = MemoryStateStore()
    ran: list[str] = []

    class Plain(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def after(self, t):
            return t.executes(lambda: ran.append("after"))

    with pytest.raises(DurationError, match="minimum"):
        execute(Plain, ["after"], env={"ZUKE_RUN_LEASE_TTL": "999ms"})
    assert ran == [] and store.list_runs() == [] and store.list_locks() == []


def test_a_lock_ttl_too_short_to_renew_is_a_definition_error_at_load() -> None:
    store = CutOff("res")
    ran: list[str] = []
    with pytest.raises(DurationError) as caught:
        execute(locked(store, lambda: ran.append("deploy"), ttl="500ms"), ["after"], env={})
    assert str(caught.value) == (
        "target 'deploy': lock TTL: 500ms is shorter than the 1s minimum: a holder renews "
        "within its TTL less a safety margin (10 %, at least 0.5s) and stops when it cannot, "
        "so a shorter TTL leaves no time to renew"
    )
    assert ran == [] and store.list_runs() == []
