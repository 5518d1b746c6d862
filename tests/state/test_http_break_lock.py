"""``HttpStateStore.break_lock``: ``DELETE /locks/:key?force=1`` and a server without it."""

from __future__ import annotations

import pytest

from tests.state.test_http_store import HOLDER, TOKEN, answer, store_with
from zuke._errors import StateError, StoreUnavailableError


def test_break_lock_sends_delete_with_force_and_returns_the_holder() -> None:
    holder = {"actor": "alice", "runId": "run-1", "since": "2026-01-01T00:00:00.000Z"}
    store, seen = store_with(answer(200, {"broken": True, "holder": holder}))
    assert store.break_lock("deploy") == HOLDER
    assert seen.calls == ["DELETE /ns/team-a/locks/deploy"]
    assert dict(seen.requests[0].url.params) == {"force": "1"}


def test_break_lock_of_a_free_key_returns_none() -> None:
    store, _ = store_with(answer(200, {"broken": False}))
    assert store.break_lock("deploy") is None


@pytest.mark.parametrize("status", [400, 404, 405, 501])
def test_a_server_without_lock_breaking_is_a_clear_state_error(status: int) -> None:
    store, _ = store_with(answer(status, {"error": "token is required"}))
    with pytest.raises(StateError, match="cannot break locks") as caught:
        store.break_lock("deploy")
    assert not isinstance(caught.value, StoreUnavailableError)
    assert TOKEN not in str(caught.value)


def test_a_break_answer_with_a_bad_holder_is_an_error() -> None:
    store, _ = store_with(answer(200, {"broken": True, "holder": {"actor": "a"}}))
    with pytest.raises(StoreUnavailableError, match="not"):
        store.break_lock("deploy")
