"""``HttpStateStore`` against ``httpx.MockTransport``: the wire, every answer checked.

Each test's handler plays a server (sometimes a deliberately broken one) and
records the requests it saw, so the tests pin what the client sends as well
as what it makes of the answers.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from zuke._errors import StateError, StoreUnavailableError, UnsafeIdError
from zuke.state import _http_client
from zuke.state._protocol import (
    Conflict,
    JournalingStateStore,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StateStore,
    Written,
)
from zuke.state.http import HttpStateStore, InsecureStateUrlError, check_url_is_secure
from zuke.state.records import GraphNode, RunDelta, RunRecord, TargetRecord, apply_delta
from zuke.state.wire import delta_to_json, parse_record, record_to_json

TOKEN = "s3cr3t-token-value-do-not-print"
BASE = "https://state.example/ns/team-a"
HOLDER = LockHolder(actor="alice", run_id="run-1", since="2026-01-01T00:00:00.000Z")
PROTO = {"x-zuke-state-protocol": "1"}


def record(run_id: str = "abc", status: Any = "running") -> RunRecord:
    return RunRecord(
        id=run_id,
        build="B",
        root_target="deploy",
        status=status,
        actor="alice",
        created_at="2026-01-01T00:00:00.000Z",
        updated_at="2026-01-01T00:00:00.000Z",
        graph=(GraphNode("deploy"),),
        targets={"deploy": TargetRecord()},
    )


Handler = Callable[[httpx.Request], httpx.Response]


@dataclass
class Recorder:
    """A MockTransport handler that answers from ``handler`` and keeps every request."""

    handler: Handler
    requests: list[httpx.Request] = field(default_factory=list)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.handler(request)

    @property
    def calls(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]


def store_with(
    handler: Handler, *, url: str = BASE, token: str | None = TOKEN
) -> tuple[HttpStateStore, Recorder]:
    recorder = Recorder(handler)
    return HttpStateStore(url, token=token, transport=httpx.MockTransport(recorder)), recorder


def reply(status: int, body: Any = None, **headers: str) -> httpx.Response:
    content = (
        b"" if body is None else body if isinstance(body, bytes) else json.dumps(body).encode()
    )
    return httpx.Response(status, content=content, headers={**PROTO, **headers})


def answer(status: int, body: Any = None, **headers: str) -> Handler:
    return lambda request: reply(status, body, **headers)


# ------------------------------------------------------------------ requests sent


def test_every_request_carries_the_protocol_header_and_the_bearer_token() -> None:
    store, seen = store_with(answer(404))
    store.get_run("abc")
    (request,) = seen.requests
    assert request.headers["x-zuke-state-protocol"] == "1"
    assert request.headers["authorization"] == f"Bearer {TOKEN}"
    assert str(request.url) == "https://state.example/ns/team-a/runs/abc"


def test_no_authorization_header_without_a_token() -> None:
    store, seen = store_with(answer(404), token=None)
    store.get_run("abc")
    assert "authorization" not in seen.requests[0].headers


def test_trailing_slashes_on_the_base_url_are_dropped() -> None:
    store, seen = store_with(answer(404), url=BASE + "//")
    store.get_run("abc")
    assert seen.requests[0].url.path == "/ns/team-a/runs/abc"


def test_a_create_sends_if_none_match_star_and_the_record_json() -> None:
    store, seen = store_with(answer(201, {}, etag='"v1"'))
    assert store.create_run(record()) == Written(version='"v1"')
    request = seen.requests[0]
    assert (request.method, request.headers["if-none-match"]) == ("PUT", "*")
    assert json.loads(request.content) == record_to_json(record())
    assert request.headers["content-type"] == "application/json"


def test_a_put_sends_if_match_with_the_expected_version() -> None:
    store, seen = store_with(answer(200, {}, etag='"v2"'))
    assert store.put_run(record(), expected_version='"v1"') == Written(version='"v2"')
    assert seen.requests[0].headers["if-match"] == '"v1"'
    assert "if-none-match" not in seen.requests[0].headers


def test_list_runs_sends_the_query_and_keeps_the_server_order() -> None:
    summaries = [record("b").summary(), record("a").summary()]
    body = [
        {
            "id": s.id,
            "build": s.build,
            "rootTarget": s.root_target,
            "status": s.status,
            "actor": s.actor,
            "createdAt": s.created_at,
            "updatedAt": s.updated_at,
        }
        for s in summaries
    ]
    store, seen = store_with(answer(200, body))
    query = RunQuery(status="failed", target="deploy", since="2026-01-01", limit=5, build="B")
    assert store.list_runs(query) == summaries
    params = dict(seen.requests[0].url.params)
    assert params == {
        "status": "failed",
        "target": "deploy",
        "since": "2026-01-01",
        "limit": "5",
        "build": "B",
    }
    store.list_runs()
    assert seen.requests[1].url.params == httpx.QueryParams()


def test_list_locks_sends_the_run_id_and_parses_the_entries() -> None:
    holder = {"actor": "alice", "runId": "run-1", "since": "2026-01-01T00:00:00.000Z"}
    body = [{"key": "deploy", "holder": holder, "expiresAt": 1_700_000_060_000, "fence": 3}]
    store, seen = store_with(answer(200, body))
    assert store.list_locks(run_id="run-1") == [
        LockEntry(key="deploy", holder=HOLDER, expires_at=1_700_000_060_000, fence=3)
    ]
    assert seen.calls == ["GET /ns/team-a/locks"]
    assert dict(seen.requests[0].url.params) == {"runId": "run-1"}
    store.list_locks()
    assert seen.requests[1].url.params == httpx.QueryParams()


def test_a_server_without_lock_listing_is_a_clear_state_error() -> None:
    store, _ = store_with(answer(404, {"error": "not found"}))
    with pytest.raises(StateError, match="does not list locks") as caught:
        store.list_locks()
    assert not isinstance(caught.value, StoreUnavailableError)
    assert TOKEN not in str(caught.value)


@pytest.mark.parametrize(
    "body",
    [
        {"key": "k"},
        [{"key": "../k", "holder": {"actor": "a", "runId": "r", "since": "s"},
          "expiresAt": 1, "fence": 1}],
        [{"key": "k", "holder": {"actor": "a"}, "expiresAt": 1, "fence": 1}],
        [{"key": "k", "holder": {"actor": "a", "runId": "r", "since": "s"},
          "expiresAt": "soon", "fence": 1}],
        [{"key": "k", "holder": {"actor": "a", "runId": "r", "since": "s"},
          "expiresAt": 1, "fence": True}],
    ],
)  # fmt: skip
def test_a_lock_listing_of_the_wrong_shape_is_an_error(body: Any) -> None:
    store, _ = store_with(answer(200, body))
    with pytest.raises(StoreUnavailableError, match="GET /locks returned a body that is not"):
        store.list_locks()


def test_lock_calls_send_the_holder_token_and_ttl() -> None:
    store, seen = store_with(answer(201, {"token": "t1", "fence": 4}))
    holder = LockHolder(actor="a", run_id="r", since="s", run_url="https://ci/1")
    assert store.acquire_lock("deploy-x", holder, 5_000) == LockAcquired(token="t1", fence=4)
    body = json.loads(seen.requests[0].content)
    assert body == {
        "holder": {"actor": "a", "runId": "r", "since": "s", "runUrl": "https://ci/1"},
        "ttlMs": 5_000,
    }
    store, seen = store_with(answer(200, {}))
    assert store.renew_lock("deploy-x", "t1", 7_000) is True
    store.release_lock("deploy-x", "t1")
    assert [json.loads(r.content) for r in seen.requests] == [
        {"token": "t1", "ttlMs": 7_000},
        {"token": "t1"},
    ]
    assert seen.calls == ["PUT /ns/team-a/locks/deploy-x", "DELETE /ns/team-a/locks/deploy-x"]


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "..", "a b", "x\x00"])
def test_unsafe_ids_and_keys_raise_before_any_request(bad: str) -> None:
    store, seen = store_with(answer(200, {}))
    calls: list[Callable[[], object]] = [
        lambda: store.get_run(bad),
        lambda: store.create_run(record(bad)),
        lambda: store.put_run(record(bad), expected_version="v"),
        lambda: store.append_run(bad, RunDelta(updated_at="x"), expected_version="v"),
        lambda: store.delete_run(bad),
        lambda: store.acquire_lock(bad, HOLDER, 1_000),
        lambda: store.renew_lock(bad, "t", 1_000),
        lambda: store.release_lock(bad, "t"),
    ]
    for call in calls:
        with pytest.raises(UnsafeIdError):
            call()
    assert seen.requests == []


@pytest.mark.parametrize("ttl", [0, -1, True])
def test_a_non_positive_ttl_raises_before_any_request(ttl: int) -> None:
    store, seen = store_with(answer(201, {"token": "t"}))
    with pytest.raises(ValueError, match="ttl"):
        store.acquire_lock("k", HOLDER, ttl)
    assert seen.requests == []


# ------------------------------------------------------------------ runs: answers


def test_get_returns_the_record_and_the_etag_and_404_is_none() -> None:
    store, _ = store_with(answer(200, record_to_json(record()), etag='"v7"'))
    stored = store.get_run("abc")
    assert stored is not None
    assert (stored.record, stored.version) == (record(), '"v7"')
    store, _ = store_with(answer(404, {"error": "no such run"}))
    assert store.get_run("abc") is None


def test_a_get_without_an_etag_is_an_error() -> None:
    store, _ = store_with(answer(200, record_to_json(record())))
    with pytest.raises(StoreUnavailableError, match=r"GET /runs/abc .*without an ETag"):
        store.get_run("abc")


@pytest.mark.parametrize(
    "body", [b"<html>proxy error</html>", b"", json.dumps([1, 2]).encode(), b'{"id": "abc"}']
)
def test_a_get_whose_body_is_not_a_run_record_is_an_error(body: bytes) -> None:
    store, _ = store_with(answer(200, body, etag='"v"'))
    with pytest.raises(
        StoreUnavailableError, match="GET /runs/abc returned a body that is not a run record"
    ):
        store.get_run("abc")


def test_a_get_answered_with_another_runs_record_is_an_error() -> None:
    store, _ = store_with(answer(200, record_to_json(record("other")), etag='"v"'))
    with pytest.raises(StoreUnavailableError, match="not the record of run 'abc'"):
        store.get_run("abc")


def test_412_is_a_conflict_for_create_and_put() -> None:
    store, _ = store_with(answer(412, {"error": "precondition failed"}))
    assert store.create_run(record()) == Conflict()
    assert store.put_run(record(), expected_version='"old"') == Conflict()


def test_a_write_answered_without_an_etag_is_an_error() -> None:
    store, _ = store_with(answer(201, {}))
    with pytest.raises(StoreUnavailableError, match=r"PUT /runs/abc .*without an ETag"):
        store.create_run(record())


@pytest.mark.parametrize("status", [200, 204, 404])
def test_delete_succeeds_on_2xx_and_404(status: int) -> None:
    store, seen = store_with(answer(status))
    store.delete_run("abc")
    assert seen.calls == ["DELETE /ns/team-a/runs/abc"]


def test_an_unexpected_status_names_the_call_and_the_servers_reason() -> None:
    store, _ = store_with(answer(400, {"error": "body is not a run record"}))
    with pytest.raises(StoreUnavailableError, match=r"DELETE /runs/abc got unexpected HTTP 400"):
        store.delete_run("abc")
    with pytest.raises(StoreUnavailableError, match="body is not a run record"):
        store.put_run(record(), expected_version="v")


@pytest.mark.parametrize("body", [{"not": "a list"}, [{"id": "x"}], b"nope"])
def test_a_listing_that_is_not_a_list_of_summaries_is_an_error(body: Any) -> None:
    store, _ = store_with(answer(200, body))
    with pytest.raises(StoreUnavailableError, match="GET /runs returned a body that is not"):
        store.list_runs()


# ------------------------------------------------------------------ PATCH and its fallback


class FakeServer:
    """An in-memory state service; ``patch`` decides how it answers PATCH."""

    def __init__(self, *, patch: str = "journal", fence: bool = True) -> None:
        self.patch = patch  # "journal" | "405" | "404" | "501"
        self.fence = fence
        self.runs: dict[str, tuple[dict[str, Any], str]] = {}
        self.serial = 0
        self.locks: dict[str, tuple[str, dict[str, Any]]] = {}

    def _etag(self) -> str:
        self.serial += 1
        return f'"v{self.serial}"'

    def __call__(self, request: httpx.Request) -> httpx.Response:
        features = {"x-zuke-state-features": "journal"} if self.patch == "journal" else {}
        kind, _, name = request.url.path.removeprefix("/ns/team-a/").partition("/")
        if kind == "locks":
            return self._lock(request, name)
        current = self.runs.get(name)
        if request.method == "GET":
            if current is None:
                return reply(404, {}, **features)
            return reply(200, current[0], etag=current[1], **features)
        if request.method == "PUT":
            if request.headers.get("if-none-match") == "*":
                if current is not None:
                    return reply(412, {})
            elif current is None or current[1] != request.headers.get("if-match"):
                return reply(412, {})
            self.runs[name] = (json.loads(request.content), self._etag())
            return reply(201 if current is None else 200, {}, etag=self.runs[name][1])
        if request.method == "PATCH":
            if self.patch != "journal":
                return reply(int(self.patch), {"error": "no PATCH here"})
            if current is None:
                return reply(404, {}, **features)
            if current[1] != request.headers.get("if-match"):
                return reply(412, {}, **features)
            from zuke.state.wire import parse_delta

            merged = apply_delta(parse_record(current[0]), parse_delta(json.loads(request.content)))
            self.runs[name] = (record_to_json(merged), self._etag())
            return reply(200, {}, etag=self.runs[name][1], **features)
        return reply(405, {})

    def _lock(self, request: httpx.Request, key: str) -> httpx.Response:
        body = json.loads(request.content)
        if request.method == "POST":
            if key in self.locks:
                return reply(409, self.locks[key][1])
            self.locks[key] = ("tok", body["holder"])
            return reply(201, {"token": "tok", "fence": 1} if self.fence else {"token": "tok"})
        return reply(405, {})


def test_append_uses_patch_with_the_delta_when_the_server_has_the_journal() -> None:
    server = FakeServer()
    store, seen = store_with(server)
    created = store.create_run(record())
    assert isinstance(created, Written)
    delta = RunDelta(updated_at="2026-01-01T00:01:00.000Z", status="succeeded")
    appended = store.append_run("abc", delta, expected_version=created.version)
    assert isinstance(appended, Written)
    patch = seen.requests[-1]
    assert (patch.method, patch.headers["if-match"]) == ("PATCH", created.version)
    assert json.loads(patch.content) == delta_to_json(delta)
    assert store.append_run("abc", delta, expected_version=created.version) == Conflict()
    stored = store.get_run("abc")
    assert stored is not None and stored.record.status == "succeeded"


@pytest.mark.parametrize("refusal", ["405", "404", "501"])
def test_append_falls_back_to_get_and_put_on_a_server_without_patch(refusal: str) -> None:
    server = FakeServer(patch=refusal)
    store, seen = store_with(server)
    created = store.create_run(record())
    assert isinstance(created, Written)
    first = RunDelta(updated_at="2026-01-01T00:01:00.000Z", status="suspended")
    appended = store.append_run("abc", first, expected_version=created.version)
    assert isinstance(appended, Written)
    assert seen.calls[1:] == [
        "PATCH /ns/team-a/runs/abc",
        "GET /ns/team-a/runs/abc",
        "PUT /ns/team-a/runs/abc",
    ]
    assert seen.requests[-1].headers["if-match"] == created.version
    # The refusal is remembered: the next append goes straight to GET + PUT.
    second = RunDelta(updated_at="2026-01-01T00:02:00.000Z", status="running")
    assert isinstance(store.append_run("abc", second, expected_version=appended.version), Written)
    assert seen.calls[4:] == ["GET /ns/team-a/runs/abc", "PUT /ns/team-a/runs/abc"]
    stored = store.get_run("abc")
    assert stored is not None
    assert stored.record == apply_delta(apply_delta(record(), first), second)


def test_the_fallback_with_a_stale_version_conflicts_without_writing() -> None:
    server = FakeServer(patch="405")
    store, seen = store_with(server)
    created = store.create_run(record())
    assert isinstance(created, Written)
    assert isinstance(
        store.put_run(record(status="failed"), expected_version=created.version), Written
    )
    delta = RunDelta(updated_at="2026-01-01T00:01:00.000Z", status="succeeded")
    assert store.append_run("abc", delta, expected_version=created.version) == Conflict()
    assert seen.calls[-2:] == ["PATCH /ns/team-a/runs/abc", "GET /ns/team-a/runs/abc"]
    assert store.append_run("missing", delta, expected_version='"v1"') == Conflict()


def test_a_404_from_a_journal_server_is_an_absent_run_not_a_missing_feature() -> None:
    store, seen = store_with(FakeServer())
    delta = RunDelta(updated_at="2026-01-01T00:01:00.000Z")
    assert store.append_run("abc", delta, expected_version='"v1"') == Conflict()
    assert store.append_run("abc", delta, expected_version='"v1"') == Conflict()
    assert seen.calls == ["PATCH /ns/team-a/runs/abc"] * 2


def test_the_store_is_a_journaling_state_store() -> None:
    store, _ = store_with(FakeServer())
    assert isinstance(store, StateStore)
    assert isinstance(store, JournalingStateStore)


# ------------------------------------------------------------------ locks: answers


def test_a_grant_without_a_fence_reports_fence_0() -> None:
    store, _ = store_with(FakeServer(fence=False))
    assert store.acquire_lock("k", HOLDER, 1_000) == LockAcquired(token="tok", fence=0)


def test_409_on_acquire_is_held_by_the_holder_in_the_body() -> None:
    store, _ = store_with(FakeServer())
    holder = LockHolder(actor="bob", run_id="run-9", since="then", run_url="https://ci/9")
    store.acquire_lock("k", holder, 1_000)
    assert store.acquire_lock("k", HOLDER, 1_000) == LockHeld(holder=holder)


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (409, {"actor": "bob"}),
        (409, b"held"),
        (201, {"fence": 1}),
        (201, {"token": ""}),
        (201, {"token": "t", "fence": -1}),
        (201, {"token": "t", "fence": True}),
        (201, {"token": "t", "fence": "3"}),
    ],
)
def test_a_malformed_lock_answer_is_an_error(status: int, body: Any) -> None:
    store, _ = store_with(answer(status, body))
    with pytest.raises(StoreUnavailableError, match="POST /locks/k returned a body that is not"):
        store.acquire_lock("k", HOLDER, 1_000)


@pytest.mark.parametrize(
    ("status", "renewed"), [(200, True), (204, True), (404, False), (409, False)]
)
def test_renew_maps_404_and_409_to_lost(status: int, renewed: bool) -> None:
    store, _ = store_with(answer(status))
    assert store.renew_lock("k", "t", 1_000) is renewed


@pytest.mark.parametrize("status", [200, 204, 404, 409])
def test_release_treats_2xx_404_and_409_as_done(status: int) -> None:
    store, _ = store_with(answer(status))
    store.release_lock("k", "t")


def test_release_answered_with_400_is_an_error() -> None:
    store, _ = store_with(answer(400, {"error": "token must be a non-empty string"}))
    with pytest.raises(StoreUnavailableError, match="DELETE /locks/k got unexpected HTTP 400"):
        store.release_lock("k", "t")


# ------------------------------------------------------------------ broken services


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_server_error_says_what_failed_and_what_to_check(status: int) -> None:
    store, _ = store_with(answer(status, b"upstream exploded"))
    with pytest.raises(StoreUnavailableError) as caught:
        store.get_run("abc")
    message = str(caught.value)
    assert f"GET /runs/abc failed with HTTP {status}" in message
    assert "Is the state service at https://state.example/ns/team-a up?" in message
    assert "ZUKE_STATE_URL" in message
    assert "exploded" not in message


def test_a_connection_error_or_timeout_is_store_unavailable() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    def stall(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    store, _ = store_with(refuse)
    with pytest.raises(StoreUnavailableError, match=r"could not connect \(ConnectError\).*up\?"):
        store.acquire_lock("k", HOLDER, 1_000)
    store, _ = store_with(stall)
    with pytest.raises(StoreUnavailableError, match="timed out after 30s"):
        store.list_runs()


def test_a_different_protocol_echo_fails_loudly_and_an_absent_one_is_tolerated() -> None:
    store, _ = store_with(lambda r: httpx.Response(404, headers={"x-zuke-state-protocol": "2"}))
    with pytest.raises(StoreUnavailableError, match="protocol mismatch"):
        store.get_run("abc")
    store, _ = store_with(lambda r: httpx.Response(404))
    assert store.get_run("abc") is None


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_token_says_so_without_the_token_or_the_servers_body(status: int) -> None:
    store, _ = store_with(answer(status, {"error": f"bad token {TOKEN}"}))
    with pytest.raises(StoreUnavailableError) as caught:
        store.get_run("abc")
    message = str(caught.value)
    assert "refused the token" in message
    assert "ZUKE_STATE_TOKEN" in message
    assert TOKEN not in message
    assert "bad token" not in message


def test_a_401_without_a_token_says_to_set_one() -> None:
    store, _ = store_with(answer(401), token=None)
    with pytest.raises(StoreUnavailableError, match="requires a token; set ZUKE_STATE_TOKEN"):
        store.get_run("abc")


def test_the_token_is_never_in_repr_or_in_any_error_message() -> None:
    messages: list[str] = []
    for status in (400, 401, 403, 412, 500, 503):
        store, _ = store_with(answer(status, {"error": "x"}))
        calls: list[Callable[[HttpStateStore], object]] = [
            lambda s: s.get_run("abc"),
            lambda s: s.create_run(record()),
            lambda s: s.acquire_lock("k", HOLDER, 1_000),
        ]
        for call in calls:
            try:
                call(store)
            except StateError as exc:
                messages.append(str(exc))
                messages.append(repr(exc))
        messages.append(repr(store))
    assert len(messages) > 20
    assert all(TOKEN not in m for m in messages)
    assert repr(store_with(answer(404))[0]) == (
        "HttpStateStore(url='https://state.example/ns/team-a', token='<redacted>')"
    )


def test_credentials_in_the_url_become_basic_auth_and_are_redacted() -> None:
    store, seen = store_with(answer(503), url="https://user:hunter2@state.example/base", token=None)
    with pytest.raises(StoreUnavailableError) as caught:
        store.get_run("abc")
    request = seen.requests[0]
    assert request.url.userinfo == b""
    assert request.headers["authorization"].startswith("Basic ")
    assert "hunter2" not in str(caught.value)
    assert "https://***@state.example/base" in str(caught.value)
    assert "hunter2" not in repr(store)


def test_a_bearer_token_wins_over_credentials_in_the_url() -> None:
    store, seen = store_with(answer(404), url="https://user:pw@state.example")
    store.get_run("abc")
    assert seen.requests[0].headers["authorization"] == f"Bearer {TOKEN}"


@pytest.mark.parametrize(
    "url", ["state.example", "ftp://state.example", "https://", "http://h/?q=1"]
)
def test_a_url_that_is_not_a_plain_http_base_is_refused(url: str) -> None:
    with pytest.raises(StateError, match="state: "):
        HttpStateStore(url)


# ------------------------------------------------------------------ bodies are closed


class TrackedStream(httpx.SyncByteStream):
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield self.body

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("status", "body"),
    [(200, b"not json"), (404, b""), (412, b"{}"), (500, b"boom"), (401, b"no"), (201, b"{}")],
)
def test_the_response_body_is_closed_on_every_path(
    status: int, body: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_http_client, "RESEND_PAUSES_S", (0.0, 0.0))
    streams: list[TrackedStream] = []

    def handler(request: httpx.Request) -> httpx.Response:
        streams.append(TrackedStream(body))
        return httpx.Response(status, stream=streams[-1], headers={"etag": '"v"', **PROTO})

    store, _ = store_with(handler)
    with contextlib.suppress(StateError):
        store.get_run("abc")
    with contextlib.suppress(StateError):
        store.create_run(record())
    resent = 2 if status >= 500 else 0  # a keyed write with no answer is sent again
    assert len(streams) == 2 + resent
    assert all(s.closed for s in streams)


def test_an_oversized_response_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http_client, "MAX_RESPONSE_BYTES", 10)
    store, _ = store_with(answer(200, b"x" * 11, etag='"v"'))
    with pytest.raises(StoreUnavailableError, match="larger than 10 bytes"):
        store.get_run("abc")


# ------------------------------------------------------------------ URL trust


@pytest.mark.parametrize(
    "url",
    [
        "https://state.example",
        "http://127.0.0.1:8780",
        "http://127.9.8.7/ns/a",
        "http://localhost:8780",
        "http://[::1]:8780",
        "HTTP://LOCALHOST",
    ],
)
def test_https_and_loopback_urls_are_accepted(url: str) -> None:
    check_url_is_secure(url, {})


def test_plaintext_to_another_host_is_refused_naming_the_variable() -> None:
    with pytest.raises(InsecureStateUrlError, match="ZUKE_STATE_URL") as caught:
        check_url_is_secure("http://example.com/state", {})
    assert "ZUKE_ALLOW_INSECURE_URL=1" in str(caught.value)
    assert isinstance(caught.value, StateError)


def test_the_opt_out_accepts_plaintext_only_when_it_is_exactly_1() -> None:
    check_url_is_secure("http://example.com", {"ZUKE_ALLOW_INSECURE_URL": "1"})
    with pytest.raises(InsecureStateUrlError):
        check_url_is_secure("http://example.com", {"ZUKE_ALLOW_INSECURE_URL": "yes"})


def test_credentials_are_redacted_from_the_refusal() -> None:
    with pytest.raises(InsecureStateUrlError) as caught:
        check_url_is_secure("http://ci:hunter2@state.internal:8780/x", {})
    assert "hunter2" not in str(caught.value)
    assert "http://***@state.internal:8780/x" in str(caught.value)


@pytest.mark.parametrize(
    "url", ["ftp://state.example", "state.example", "https://", "http://[::1", "file:///x"]
)
def test_urls_that_are_not_http_are_refused(url: str) -> None:
    with pytest.raises(InsecureStateUrlError, match="ZUKE_STATE_URL"):
        check_url_is_secure(url, {"ZUKE_ALLOW_INSECURE_URL": "1"})


def test_a_host_that_merely_starts_like_loopback_is_not_loopback() -> None:
    for url in ("http://127.0.0.1.example.com", "http://localhost.evil.example", "http://0.0.0.0"):
        with pytest.raises(InsecureStateUrlError):
            check_url_is_secure(url, {})


def test_a_renewal_times_out_well_inside_half_the_ttl() -> None:
    from zuke.state.http import renewal_timeout_s

    assert renewal_timeout_s(60_000, 30.0) == 15.0  # the lease: 15 s, not the 30 s default
    assert renewal_timeout_s(3_600_000, 30.0) == 30.0  # never longer than the default
    assert renewal_timeout_s(100, 30.0) == 0.05


def test_a_renewal_request_carries_its_short_timeout() -> None:
    seen: list[object] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions.get("timeout"))
        return httpx.Response(200, json={"renewed": True}, headers={"x-zuke-state-protocol": "1"})

    store = HttpStateStore("http://127.0.0.1:1", transport=httpx.MockTransport(handler))
    assert store.renew_lock("deploy", "tok", 60_000)
    (timeouts,) = seen
    assert isinstance(timeouts, dict) and timeouts["read"] == 15.0
