"""What ``zuke serve`` stores and refuses: JSON edge cases, bounds, the new queries.

Any JSON the contract allows is stored (a lone surrogate escape included),
what is not JSON (``NaN``, ``Infinity``) is a 400, and every bound a caller
can exceed — ``limit``, ``ttlMs``, key length — is a 400 with the same message
every store gives. Then the listing filters: ``build``, ``since`` compared as
a time, and ``GET /locks``. All over HTTP, against a server in process.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.serve.support import TOKEN, in_process
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError, UnsafeIdError
from zuke._serve import StateServer
from zuke.state._ids import LockTtlError, check_id, check_ttl
from zuke.state._protocol import LockAcquired, LockEntry, RunQuery, Written
from zuke.state.http import HttpStateStore
from zuke.state.lock_rules import MAX_TTL_MS
from zuke.state.records import GraphNode, LockHolder, RunRecord
from zuke.state.wire import record_to_json

CLOCK = ManualClock()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StateServer, httpx.Client]]:
    with in_process(tmp_path_factory.mktemp("json"), clock=CLOCK) as pair:
        yield pair


@pytest.fixture
def raw(served: tuple[StateServer, httpx.Client]) -> httpx.Client:
    return served[1]


@pytest.fixture
def store(served: tuple[StateServer, httpx.Client]) -> Iterator[HttpStateStore]:
    with HttpStateStore(f"{served[0].url}/ns/{uuid.uuid4().hex[:10]}", token=TOKEN) as s:
        yield s


def record(run_id: str, **fields: Any) -> RunRecord:
    base: dict[str, Any] = {
        "id": run_id,
        "build": "JsonBuild",
        "root_target": "deploy",
        "status": "running",
        "actor": "tester",
        "created_at": "2026-01-15T00:00:00.000Z",
        "updated_at": "2026-01-15T00:00:00.000Z",
        "graph": (GraphNode("deploy"),),
    }
    return RunRecord(**{**base, **fields})


def fresh() -> str:
    return f"r-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------------ JSON in and out


def test_a_surrogate_pair_is_stored_and_a_lone_surrogate_refused_with_400(
    raw: httpx.Client,
) -> None:
    # json.dumps escapes as \ud83d\ude00 (a pair: one character) and \ud800 (alone: none);
    # a lone one is not text, so nothing holding one is stored (issue 25).
    run_id = fresh()
    body = record_to_json(record(run_id, actor="tester \ud83d\ude00", build="B"))
    body["meta"] = {"note": "caf\u00e9 \ud83d\ude00"}
    sent = json.dumps(body).encode()
    assert b"\\ud83d\\ude00" in sent
    created = raw.put(f"/runs/{run_id}", headers={"If-None-Match": "*"}, content=sent)
    assert created.status_code == 201, created.text
    assert json.loads(raw.get(f"/runs/{run_id}").content) == json.loads(sent)
    lone = fresh()
    bad = json.dumps(record_to_json(record(lone, actor="\ud800 tester"))).encode()
    refused = raw.put(f"/runs/{lone}", headers={"If-None-Match": "*"}, content=bad)
    assert refused.status_code == 400 and "lone surrogate" in refused.json()["error"]
    assert raw.get(f"/runs/{lone}").status_code == 404


def test_a_patch_and_a_lock_holder_with_a_lone_surrogate_are_refused_with_400(
    raw: httpx.Client,
) -> None:
    run_id = fresh()
    created = raw.put(
        f"/runs/{run_id}", headers={"If-None-Match": "*"}, json=record_to_json(record(run_id))
    )
    delta = {"updatedAt": "2026-01-15T00:00:01.000Z", "actor": "\udbff"}
    patched = raw.patch(
        f"/runs/{run_id}",
        headers={"If-Match": created.headers["etag"]},
        content=json.dumps(delta).encode(),
    )
    assert patched.status_code == 400, patched.text
    assert raw.get(f"/runs/{run_id}").headers["etag"] == created.headers["etag"]
    key = f"k-{uuid.uuid4().hex[:8]}"
    holder = {"actor": "\ud800", "runId": run_id, "since": "2026-01-15T00:00:00Z"}
    claim = json.dumps({"holder": holder, "ttlMs": 60_000}).encode()
    assert raw.post(f"/locks/{key}", content=claim).status_code == 400
    assert raw.get("/locks", params={"runId": run_id}).json() == []


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_nan_and_infinity_are_not_json_and_are_refused_with_400(
    raw: httpx.Client, number: str
) -> None:
    run_id = fresh()
    text = json.dumps(record_to_json(record(run_id)))[:-1] + f',"meta":{{"x":{number}}}}}'
    reply = raw.put(f"/runs/{run_id}", headers={"If-None-Match": "*"}, content=text.encode())
    assert reply.status_code == 400
    assert reply.json()["error"].startswith("body is not valid JSON: ")
    assert raw.get(f"/runs/{run_id}").status_code == 404
    lock = raw.post("/locks/nan-key", content=f'{{"ttlMs": {number}}}'.encode())
    assert lock.status_code == 400


@pytest.mark.parametrize("limit", ["99999999999999999999999", "2147483648", "1" * 5000, "١٢"])
def test_a_huge_or_non_ascii_limit_is_a_400_not_a_500(raw: httpx.Client, limit: str) -> None:
    reply = raw.get("/runs", params={"limit": limit})
    assert reply.status_code == 400
    assert reply.json() == {"error": "limit must be an integer from 0 to 2147483647"}


def test_the_largest_limit_is_accepted(raw: httpx.Client) -> None:
    assert raw.get("/runs", params={"limit": "2147483647"}).status_code == 200


# ------------------------------------------------------------------ bounds, as every store


@pytest.mark.parametrize("ttl", [MAX_TTL_MS + 1, 0, -5, "60000", True, None])
def test_a_ttl_out_of_bounds_gets_the_message_every_store_gives(
    raw: httpx.Client, ttl: Any
) -> None:
    holder = {"actor": "a", "runId": "r", "since": "s"}
    reply = raw.post(f"/locks/{fresh()}", json={"holder": holder, "ttlMs": ttl})
    assert reply.status_code == 400
    with pytest.raises(LockTtlError) as caught:
        check_ttl(ttl)
    assert reply.json() == {"error": str(caught.value)}
    assert "366 days" in str(caught.value)


def test_the_longest_ttl_and_a_fractional_one_are_accepted(raw: httpx.Client) -> None:
    holder = {"actor": "a", "runId": "r", "since": "s"}
    for ttl in (MAX_TTL_MS, 1500.5):
        assert raw.post(f"/locks/{fresh()}", json={"holder": holder, "ttlMs": ttl}).is_success


def test_a_key_of_201_characters_gets_the_message_every_store_gives(raw: httpx.Client) -> None:
    key = "k" * 201
    reply = raw.post(f"/locks/{key}", json={})
    assert reply.status_code == 400
    with pytest.raises(UnsafeIdError) as caught:
        check_id(key, "lock key")
    assert reply.json() == {"error": str(caught.value)}
    assert raw.post(f"/locks/{'k' * 200}", json={}).status_code == 400  # the body, not the key
    no_ttl = {"holder": {"actor": "a", "runId": "r", "since": "s"}}
    assert "366 days" in raw.post(f"/locks/{'k' * 200}", json=no_ttl).json()["error"]


def test_the_client_refuses_a_ttl_over_the_bound_before_sending(store: HttpStateStore) -> None:
    holder = LockHolder(actor="a", run_id="r", since="s")
    with pytest.raises(LockTtlError):
        store.acquire_lock("key", holder, MAX_TTL_MS + 1)
    with pytest.raises(ValueError, match="366 days"):  # still a ValueError, as before
        store.renew_lock("key", "token", 0)


# ------------------------------------------------------------------ listing runs


def test_list_runs_filters_by_build(store: HttpStateStore) -> None:
    for run_id, build in (("a1", "Alpha"), ("b1", "Beta"), ("a2", "Alpha")):
        assert isinstance(store.create_run(record(run_id, build=build)), Written)
    assert [s.id for s in store.list_runs(RunQuery(build="Alpha"))] == ["a2", "a1"]
    assert [s.id for s in store.list_runs(RunQuery(build="Beta", status="running"))] == ["b1"]
    assert store.list_runs(RunQuery(build="Gamma")) == []


def test_since_compares_times_not_text(store: HttpStateStore) -> None:
    store.create_run(record("half", created_at="2026-01-15T00:00:00.500Z"))
    store.create_run(record("offset", created_at="2026-01-15T06:00:00+05:30"))  # 00:30Z
    store.create_run(record("before", created_at="2026-01-14T23:59:59.999Z"))
    since = store.list_runs(RunQuery(since="2026-01-15T00:00:00Z"))
    assert [s.id for s in since] == ["offset", "half"]  # newest first, by time
    offset = store.list_runs(RunQuery(since="2026-01-15T05:30:00.500+05:30"))
    assert [s.id for s in offset] == ["offset", "half"]  # inclusive
    assert [s.id for s in store.list_runs(RunQuery(since="2026-01-15T00:30:00.001Z"))] == []


def test_a_since_that_is_not_an_instant_is_refused(store: HttpStateStore) -> None:
    with pytest.raises(StoreUnavailableError, match="since must be an ISO-8601 instant"):
        store.list_runs(RunQuery(since="tomorrow"))


def test_the_client_clamps_a_limit_the_way_other_stores_read_it(store: HttpStateStore) -> None:
    store.create_run(record("only"))
    assert store.list_runs(RunQuery(limit=-3)) == []
    assert [s.id for s in store.list_runs(RunQuery(limit=10**30))] == ["only"]


# ------------------------------------------------------------------ listing locks


def holder(run_id: str) -> LockHolder:
    return LockHolder(actor="tester", run_id=run_id, since="2026-01-15T00:00:00Z")


def test_list_locks_reports_unreleased_claims_sorted_by_key(store: HttpStateStore) -> None:
    b = store.acquire_lock("b-key", holder("run-1"), 60_000)
    a = store.acquire_lock("a-key", holder("run-2"), 1_000)
    c = store.acquire_lock("c-key", holder("run-1"), 60_000)
    assert isinstance(a, LockAcquired) and isinstance(b, LockAcquired)
    assert isinstance(c, LockAcquired)
    store.release_lock("c-key", c.token)
    CLOCK.advance(5_000)  # a-key's claim expires: still listed, only an acquirer ends it
    now = CLOCK.now_ms()
    assert store.list_locks() == [
        LockEntry(key="a-key", holder=holder("run-2"), expires_at=now - 4_000, fence=a.fence),
        LockEntry(key="b-key", holder=holder("run-1"), expires_at=now + 55_000, fence=b.fence),
    ]
    assert [e.key for e in store.list_locks(run_id="run-1")] == ["b-key"]
    assert store.list_locks(run_id="nobody") == []


def test_list_locks_refuses_an_unsafe_run_id(raw: httpx.Client, store: HttpStateStore) -> None:
    assert raw.get("/locks", params={"runId": "../x"}).status_code == 400
    with pytest.raises(UnsafeIdError):
        store.list_locks(run_id="../x")
