"""Taking a run's lease: a store that cannot answer is asked again; one that refuses is not."""

from __future__ import annotations

import asyncio

import pytest

from zuke._engine.claims import acquire_lease
from zuke._errors import StateError, StoreRefusedError, StoreUnavailableError
from zuke.state.memory import MemoryStateStore
from zuke.state.records import LockHolder

HOLDER = LockHolder(actor="alice", run_id="r1", since="2026-12-01T00:00:00Z")


class Failing(MemoryStateStore):
    def __init__(self, error: StateError) -> None:
        super().__init__()
        self.error, self.asked = error, 0

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int):
        self.asked += 1
        raise self.error


def test_a_store_that_refuses_is_not_asked_again_and_its_message_stands() -> None:
    refusal = StoreRefusedError(
        "state: the state branch was deleted; run `zuke state init --force`"
    )
    store = Failing(refusal)
    with pytest.raises(StoreRefusedError) as caught:
        asyncio.run(acquire_lease(store, "r1", HOLDER, ttl_ms=5000, backoff_s=(0.0, 0.0)))
    assert store.asked == 1 and caught.value is refusal
    assert "did not answer" not in str(caught.value)


def test_a_store_that_does_not_answer_is_asked_again_then_named() -> None:
    store = Failing(StoreUnavailableError("connection refused"))
    with pytest.raises(StateError, match="did not answer"):
        asyncio.run(acquire_lease(store, "r1", HOLDER, ttl_ms=5000, backoff_s=(0.0, 0.0)))
    assert store.asked == 3
