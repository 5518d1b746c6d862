"""What the scenarios share: sample records and holders, fresh ids, a thread race, the hooks.

:class:`ContractBase` holds the hooks a store's test class may override (see
:mod:`zuke.testing.store_contract`) and the small assertions every scenario
uses; the scenario classes in ``runs``, ``listing`` and ``locks`` build on it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import ClassVar, TypeVar

import pytest

from zuke._clock import ManualClock
from zuke.state._protocol import (
    JournalingStateStore,
    LockAcquired,
    LockHolder,
    StateStore,
    StoredRun,
    Written,
)
from zuke.state.records import (
    EffectRecord,
    GraphNode,
    RunEvent,
    RunRecord,
    RunStatus,
    Signal,
    TargetRecord,
    WaitingFor,
)

T = TypeVar("T")

UNSAFE_IDS: tuple[str, ...] = ("../x", "a/b", "a b", "", "..", ".", "x\x00y", "../../etc/passwd")


def fresh(prefix: str = "contract") -> str:
    """A unique, safe id."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def sample_record(
    run_id: str | None = None,
    *,
    status: RunStatus = "running",
    created_at: str = "2026-01-02T03:04:05.678Z",
    targets: tuple[str, ...] = ("build", "test"),
) -> RunRecord:
    """A plausible minimal record: every target ``pending``, optional fields absent."""
    return RunRecord(
        id=run_id or fresh("run"),
        build="ContractBuild",
        root_target=targets[-1],
        status=status,
        actor="contract-suite",
        created_at=created_at,
        updated_at=created_at,
        graph=tuple(
            GraphNode(name, depends_on=(targets[i - 1],) if i else ())
            for i, name in enumerate(targets)
        ),
        targets={name: TargetRecord() for name in targets},
    )


def sample_holder(run_id: str = "run-1", *, run_url: str | None = None) -> LockHolder:
    return LockHolder(
        actor="contract-suite", run_id=run_id, since="2026-01-02T03:04:05.678Z", run_url=run_url
    )


def rich_record(run_id: str) -> RunRecord:
    """A record with every optional field set and fields this zuke does not know."""
    return RunRecord(
        id=run_id,
        build="ContractBuild",
        build_id="acme/widgets",
        root_target="deploy",
        status="suspended",
        actor="alice",
        created_at="2026-01-02T03:04:05.678Z",
        updated_at="2026-01-02T03:09:00.000Z",
        graph=(GraphNode("build"), GraphNode("deploy", depends_on=("build",))),
        params={"version": "1.2.3", "env": "prod"},
        targets={
            "build": TargetRecord(
                status="succeeded",
                meta={"artifact": "widgets-1.2.3.tgz", "sizes": [1, 2]},
                started_at="2026-01-02T03:04:06.000Z",
                ended_at="2026-01-02T03:05:00.000Z",
                effects={"upload": EffectRecord(status="done", attempts=1)},
            ),
            "deploy": TargetRecord(
                status="waiting",
                waiting_for=WaitingFor(
                    trigger="approval",
                    deadline="2026-01-03T00:00:00.000Z",
                    on_timeout="rollback",
                    on_timeout_is_target=True,
                ),
            ),
        },
        signals={
            "approval": Signal(data={"by": "bob", "ok": True}, received_at="2026-01-02T03:08Z")
        },
        events=(
            RunEvent(at="2026-01-02T03:07:00.000Z", tool="signal", actor="bob", args={"n": "1"}),
            RunEvent(
                at="2026-01-02T03:08:00.000Z",
                tool="cancel",
                actor="eve",
                outcome="denied",
                detail="not an owner",
            ),
        ),
        degraded=True,
        deadline_at="2026-01-05T00:00:00.000Z",
        intended_terminal="cancelled",
        extra={"x-future-field": {"nested": [1, "two", None]}, "schemaHint": 7},
    )


def race(n: int, action: Callable[[int], T]) -> list[T]:
    """Run ``action(i)`` on ``n`` threads released together by a barrier."""
    barrier = threading.Barrier(n)
    results: list[T | None] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = action(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    if errors:
        raise errors[0]
    assert all(r is not None for r in results), "a racer did not finish"
    return [r for r in results if r is not None]


class ContractBase:
    """The hooks a store's test class may override, and the assertions scenarios share."""

    lock_ttl_ms: ClassVar[int] = 200
    lapse_margin_ms: ClassVar[int] = 150
    live_ttl_ms: ClassVar[int] = 3_600_000
    racers: ClassVar[int] = 8
    renews_expired_claims: ClassVar[bool] = True

    # ------------------------------------------------------------------ hooks

    @pytest.fixture
    def store(self) -> StateStore:
        raise NotImplementedError(
            f"{type(self).__name__} must define a `store` fixture returning the store under test"
        )

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        """Make a lock taken with ``ttl_ms`` expire by the store's clock."""
        clock = getattr(store, "clock", None)
        if isinstance(clock, ManualClock):
            clock.advance(ttl_ms + 1)
            return
        time.sleep((ttl_ms + self.lapse_margin_ms) / 1000)

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        """The store racer ``index`` uses in the concurrency scenarios."""
        return store

    # ------------------------------------------------------------------ helpers

    def _created(self, store: StateStore, record: RunRecord) -> str:
        result = store.create_run(record)
        assert isinstance(result, Written), f"create_run({record.id!r}) returned {result!r}"
        return result.version

    def _stored(self, store: StateStore, run_id: str) -> StoredRun:
        stored = store.get_run(run_id)
        assert stored is not None, f"get_run({run_id!r}) returned None after a write"
        return stored

    def _journaling(self, store: StateStore) -> JournalingStateStore:
        if not isinstance(store, JournalingStateStore):
            pytest.skip("the store does not implement append_run")
        return store

    def _acquired(self, store: StateStore, key: str, ttl_ms: int, who: str = "a") -> LockAcquired:
        result = store.acquire_lock(key, sample_holder(who), ttl_ms)
        assert isinstance(result, LockAcquired), f"acquire_lock({key!r}) returned {result!r}"
        return result
