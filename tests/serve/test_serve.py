"""``zuke serve`` as a real process: auth, limits, validation, expiry, shutdown, restart.

Most tests share one server process (module scope); those about starting and
stopping start their own. A few at the end run :class:`StateServer` in a
thread with a ManualClock, to pin server-clock expiry without waiting.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.support import (
    TOKEN,
    ServerProcess,
    child_env,
    running_server,
    serve_command,
    start_server,
)
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError, UsageError
from zuke._serve import StateServer, serve
from zuke._serve.__main__ import main
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, LockHolder, Written
from zuke.state.http import HttpStateStore
from zuke.state.records import GraphNode, RunDelta, RunRecord
from zuke.state.wire import record_to_json

DEADLINE_S = 15.0


def record(run_id: str, *, status: Any = "running") -> RunRecord:
    return RunRecord(
        id=run_id,
        build="ServeTest",
        root_target="deploy",
        status=status,
        actor="tester",
        created_at="2026-03-01T00:00:00.000Z",
        updated_at="2026-03-01T00:00:00.000Z",
        graph=(GraphNode("build"), GraphNode("deploy", ("build",))),
    )


def fresh(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


HOLDER = LockHolder(actor="tester", run_id="run-1", since="2026-03-01T00:00:00.000Z")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("serve"), args=["--max-body-bytes", "4096"]) as s:
        yield s


@pytest.fixture
def raw(server: ServerProcess) -> Iterator[httpx.Client]:
    """A plain client with the right token, for requests the store would never send."""
    headers = {"Authorization": f"Bearer {TOKEN}", "x-zuke-state-protocol": "1"}
    with httpx.Client(base_url=server.url, headers=headers) as client:
        yield client


@pytest.fixture
def store(server: ServerProcess) -> Iterator[HttpStateStore]:
    with HttpStateStore(server.url, token=TOKEN) as s:
        yield s


# ------------------------------------------------------------------ auth


def test_a_request_without_a_token_is_refused_with_401(server: ServerProcess) -> None:
    reply = httpx.get(f"{server.url}/runs")
    assert reply.status_code == 401
    assert reply.json() == {"error": "unauthorized"}
    assert reply.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize(
    "authorization",
    [
        f"Bearer {TOKEN}x",
        f"Bearer {TOKEN[:-1]}",
        TOKEN,
        f"Basic {TOKEN}",
        "Bearer",
        f"Bearer {TOKEN} extra",
    ],
    # ids without the (random) token: the same ids in every process that collects them
    ids=["extra-char", "cut", "no-scheme", "basic", "bearer-only", "extra-word"],
)
def test_a_wrong_token_is_refused_with_a_generic_body(
    server: ServerProcess, authorization: str
) -> None:
    reply = httpx.put(
        f"{server.url}/runs/{fresh()}",
        headers={"Authorization": authorization, "If-None-Match": "*"},
        content=json.dumps(record_to_json(record("x"))),
    )
    assert reply.status_code == 401
    assert reply.json() == {"error": "unauthorized"}
    assert TOKEN[:12] not in reply.text


def test_the_client_reports_a_refused_token_without_leaking_it(server: ServerProcess) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    store = HttpStateStore(server.url, token=wrong)
    with pytest.raises(StoreUnavailableError, match="ZUKE_STATE_TOKEN") as caught:
        store.get_run("anything")
    store.close()
    assert wrong not in str(caught.value)
    assert "401" in str(caught.value)


def test_the_log_has_one_line_per_request_and_never_the_token(
    server: ServerProcess, store: HttpStateStore
) -> None:
    run_id = fresh("logged")
    assert isinstance(store.create_run(record(run_id)), Written)
    log = server.stderr()
    assert f"zuke serve: PUT /runs/{run_id} 201" in log.splitlines()
    assert TOKEN not in log
    assert "tester" not in log  # bodies are never logged


def test_a_client_resetting_mid_body_is_one_log_line_not_a_traceback(
    server: ServerProcess,
) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S)
    sock.sendall(
        (
            f"PUT /runs/dropped HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "If-None-Match: *\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
        ).encode()
    )
    assert sock.recv(100).startswith(b"HTTP/1.1 100")  # the server is reading the body now
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()  # with linger 0: a reset, not a clean close
    deadline = time.monotonic() + DEADLINE_S
    while "connection dropped" not in server.stderr():
        assert time.monotonic() < deadline, server.stderr()
    assert "zuke serve: connection dropped (ConnectionResetError)" in server.stderr()
    assert "Traceback" not in server.stderr()


# ------------------------------------------------------------------ refusing to start


def test_refuses_to_start_without_a_token_unless_no_auth(tmp_path: Path) -> None:
    child = subprocess.run(
        serve_command(tmp_path / "state.db", "--port", "0"),
        env=child_env(None),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert child.returncode == 2
    assert "ZUKE_SERVE_TOKEN" in child.stderr
    assert "--no-auth" in child.stderr
    assert child.stdout == ""
    assert not (tmp_path / "state.db").exists()


def test_no_auth_on_loopback_serves_without_a_token(tmp_path: Path) -> None:
    with (
        running_server(tmp_path, token=None, args=["--no-auth"]) as server,
        HttpStateStore(server.url) as store,
    ):
        assert isinstance(store.create_run(record("open")), Written)
        assert store.get_run("open") is not None


def test_no_auth_on_a_non_loopback_host_is_refused(tmp_path: Path) -> None:
    child = subprocess.run(
        [*serve_command(tmp_path / "state.db", "--port", "0"), "--host", "0.0.0.0", "--no-auth"],
        env=child_env(TOKEN),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert child.returncode == 2
    assert "--no-auth is only allowed on a loopback host" in child.stderr


def test_main_returns_2_for_usage_errors_without_exiting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ZUKE_SERVE_TOKEN", raising=False)
    assert main(["--port", "0", "--db", str(tmp_path / "s.db")]) == 2
    assert "ZUKE_SERVE_TOKEN" in capsys.readouterr().err
    assert main(["--port", "not-a-port"]) == 2
    assert main(["--port", "70000", "--no-auth"]) == 2


def test_state_server_refuses_an_unsafe_auth_configuration(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="ZUKE_SERVE_TOKEN"):
        StateServer(db_path=tmp_path / "s.db", token=None)
    with pytest.raises(UsageError, match="loopback"):
        StateServer(db_path=tmp_path / "s.db", host="192.0.2.1", no_auth=True)


# ------------------------------------------------------------------ limits and validation


def test_a_body_over_the_limit_is_refused_with_413(raw: httpx.Client) -> None:
    reply = raw.put(
        f"/runs/{fresh()}", headers={"If-None-Match": "*"}, content=b"{" + b" " * 5000 + b"}"
    )
    assert reply.status_code == 413
    assert "error" in reply.json()


def test_the_limit_is_judged_from_content_length_before_reading(server: ServerProcess) -> None:
    # Claim a huge body and send none: the answer must come without waiting for it.
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=DEADLINE_S)
    try:
        conn.putrequest("PUT", "/runs/huge")
        conn.putheader("Authorization", f"Bearer {TOKEN}")
        conn.putheader("Content-Length", str(10**12))
        conn.endheaders()
        reply = conn.getresponse()
        assert reply.status == 413
        assert reply.getheader("Connection") == "close"
    finally:
        conn.close()


def test_a_chunked_body_without_a_length_is_refused(raw: httpx.Client) -> None:
    reply = raw.put(f"/runs/{fresh()}", headers={"If-None-Match": "*"}, content=iter([b"{", b"}"]))
    assert reply.status_code == 411


@pytest.mark.parametrize("body", [b"{not json", b"\xff\xfe", b"[1,"])
def test_invalid_json_is_refused_with_400(raw: httpx.Client, body: bytes) -> None:
    reply = raw.put(f"/runs/{fresh()}", headers={"If-None-Match": "*"}, content=body)
    assert reply.status_code == 400
    assert reply.json() == {"error": "body is not valid JSON"}


def test_a_body_that_is_not_a_run_record_is_refused_with_400(raw: httpx.Client) -> None:
    run_id = fresh()
    reply = raw.put(f"/runs/{run_id}", headers={"If-None-Match": "*"}, json={"id": run_id})
    assert reply.status_code == 400
    assert "not a run record" in reply.json()["error"]


def test_a_record_for_another_id_is_refused_with_400(raw: httpx.Client) -> None:
    body = record_to_json(record("someone-else"))
    reply = raw.put(f"/runs/{fresh()}", headers={"If-None-Match": "*"}, json=body)
    assert reply.status_code == 400


def test_a_put_without_a_precondition_is_refused(raw: httpx.Client) -> None:
    run_id = fresh()
    reply = raw.put(f"/runs/{run_id}", json=record_to_json(record(run_id)))
    assert reply.status_code == 428


@pytest.mark.parametrize("segment", ["%2E%2E", "a%2Fb", "a%20b", "%00", "a:b", "x" * 201])
def test_an_unsafe_id_in_the_path_is_refused_with_400(raw: httpx.Client, segment: str) -> None:
    assert raw.get(f"/runs/{segment}").status_code == 400
    assert raw.post(f"/locks/{segment}", json={}).status_code == 400


def test_unknown_paths_are_404_and_wrong_methods_405(raw: httpx.Client) -> None:
    assert raw.get("/").status_code == 404
    assert raw.get("/nothing/here").status_code == 404
    assert raw.get("/runs/a/b").status_code == 404
    assert raw.get("/builds/a/b").status_code == 404
    assert raw.post("/locks", json={}).status_code == 405
    reply = raw.post(f"/runs/{fresh()}", json={})
    assert reply.status_code == 405
    assert set(reply.headers["allow"].split(", ")) == {"GET", "PUT", "PATCH", "DELETE"}
    assert raw.delete("/runs").status_code == 405
    assert raw.get("/locks/k").status_code == 405


def test_bad_lock_bodies_and_queries_are_refused_with_400(raw: httpx.Client) -> None:
    key = fresh("k")
    holder = {"actor": "a", "runId": "r", "since": "s"}
    assert raw.post(f"/locks/{key}", json={"holder": holder}).status_code == 400
    assert raw.post(f"/locks/{key}", json={"holder": holder, "ttlMs": 0}).status_code == 400
    assert raw.post(f"/locks/{key}", json={"holder": holder, "ttlMs": True}).status_code == 400
    assert raw.post(f"/locks/{key}", json={"holder": {"actor": 1}, "ttlMs": 5}).status_code == 400
    assert raw.put(f"/locks/{key}", json={"ttlMs": 5}).status_code == 400
    assert raw.get("/runs", params={"status": "bogus"}).status_code == 400
    assert raw.get("/runs", params={"limit": "-1"}).status_code == 400


def test_every_answer_echoes_the_protocol_and_advertises_the_journal(raw: httpx.Client) -> None:
    for reply in (raw.get("/runs"), raw.get("/nope"), raw.get(f"/runs/{fresh()}")):
        assert reply.headers["x-zuke-state-protocol"] == "1"
        assert reply.headers["x-zuke-state-features"] == "journal"


def test_a_request_speaking_another_protocol_is_refused(raw: httpx.Client) -> None:
    reply = raw.get("/runs", headers={"x-zuke-state-protocol": "2"})
    assert reply.status_code == 400
    assert "protocol mismatch" in reply.json()["error"]


# ------------------------------------------------------------------ behaviour


def test_namespaces_are_isolated(server: ServerProcess) -> None:
    a = HttpStateStore(f"{server.url}/ns/team-a", token=TOKEN)
    b = HttpStateStore(f"{server.url}/ns/team-b/", token=TOKEN)
    root = HttpStateStore(server.url, token=TOKEN)
    run_id, key = fresh("shared"), fresh("lock")
    assert isinstance(a.create_run(record(run_id)), Written)
    assert b.get_run(run_id) is None
    assert root.get_run(run_id) is None
    assert isinstance(b.create_run(record(run_id, status="failed")), Written)
    stored_a, stored_b = a.get_run(run_id), b.get_run(run_id)
    assert stored_a is not None and stored_b is not None
    assert (stored_a.record.status, stored_b.record.status) == ("running", "failed")
    assert [s.id for s in b.list_runs()] == [run_id]
    assert isinstance(a.acquire_lock(key, HOLDER, 60_000), LockAcquired)
    assert isinstance(b.acquire_lock(key, HOLDER, 60_000), LockAcquired)
    for s in (a, b, root):
        s.close()


def test_patch_applies_a_delta_and_a_stale_version_conflicts(store: HttpStateStore) -> None:
    run_id = fresh("patched")
    created = store.create_run(record(run_id))
    assert isinstance(created, Written)
    delta = RunDelta(updated_at="2026-03-01T00:01:00.000Z", status="succeeded")
    patched = store.append_run(run_id, delta, expected_version=created.version)
    assert isinstance(patched, Written)
    assert isinstance(store.append_run(run_id, delta, expected_version=created.version), Conflict)
    stored = store.get_run(run_id)
    assert stored is not None
    assert (stored.record.status, stored.version) == ("succeeded", patched.version)


def test_patch_of_an_absent_run_is_404_with_the_journal_feature(raw: httpx.Client) -> None:
    reply = raw.patch(
        f"/runs/{fresh()}", headers={"If-Match": '"x"'}, json={"updatedAt": "2026-03-01"}
    )
    assert reply.status_code == 404
    assert reply.headers["x-zuke-state-features"] == "journal"


def test_an_expired_lock_is_reclaimed_by_the_server_clock(store: HttpStateStore) -> None:
    key = fresh("expiring")
    first = store.acquire_lock(key, HOLDER, 300)
    assert isinstance(first, LockAcquired)
    assert isinstance(store.acquire_lock(key, HOLDER, 60_000), LockHeld)
    # Poll (no fixed sleep) until the server's clock says the claim has lapsed.
    deadline = time.monotonic() + DEADLINE_S
    attempts = 0
    while True:
        attempts += 1
        result = store.acquire_lock(key, HOLDER, 60_000)
        if isinstance(result, LockAcquired) or time.monotonic() > deadline:
            break
    assert isinstance(result, LockAcquired), "the lock never expired"
    assert result.fence > first.fence
    assert store.renew_lock(key, first.token, 60_000) is False


# ------------------------------------------------------------------ shutdown and restart


def test_sigterm_finishes_the_in_flight_request_then_exits_0(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        body = json.dumps(record_to_json(record("in-flight"))).encode()
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S)
        replies = sock.makefile("rb")
        sock.sendall(
            (
                f"PUT /runs/in-flight HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
                f"If-None-Match: *\r\nContent-Length: {len(body)}\r\n"
                "Expect: 100-continue\r\n\r\n"
            ).encode()
        )
        # "100 Continue" means the server has taken the request in: it is in flight.
        assert replies.readline().startswith(b"HTTP/1.1 100")
        assert replies.readline() == b"\r\n"
        server.proc.terminate()
        # New connections failing (refused, reset, or left in a full backlog)
        # shows that the server has stopped accepting: shutdown has begun.
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
            except OSError:
                break
        else:
            raise AssertionError("the server kept accepting connections after SIGTERM")
        sock.sendall(body)
        answer = replies.read()  # until the server closes the connection
        replies.close()
        sock.close()
        assert answer.startswith(b"HTTP/1.1 201"), answer[:200]
        assert b"connection: close" in answer.lower()  # names are case-insensitive
        assert server.proc.wait(timeout=DEADLINE_S) == 0
    finally:
        server.terminate()
    assert "Traceback" not in server.stderr()
    assert "zuke serve: PUT /runs/in-flight 201" in server.stderr()


def test_an_idle_keep_alive_connection_does_not_hold_up_shutdown(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with httpx.Client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            assert client.get(f"{server.url}/runs").status_code == 200  # kept alive
            server.proc.terminate()
            # The drain would wait 10 s for this connection if it were not woken.
            assert server.proc.wait(timeout=8) == 0
    finally:
        server.terminate()


def test_a_restart_on_the_same_db_keeps_runs_and_fences(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    with running_server(tmp_path, db=db) as first, HttpStateStore(first.url, token=TOKEN) as s:
        created = s.create_run(record("kept"))
        grant = s.acquire_lock("kept-lock", HOLDER, 60_000)
        assert isinstance(created, Written) and isinstance(grant, LockAcquired)
        s.release_lock("kept-lock", grant.token)
    with running_server(tmp_path, db=db) as second, HttpStateStore(second.url, token=TOKEN) as s:
        stored = s.get_run("kept")
        assert stored is not None
        assert (stored.record, stored.version) == (record("kept"), created.version)
        again = s.acquire_lock("kept-lock", HOLDER, 60_000)
        assert isinstance(again, LockAcquired)
        assert again.fence > grant.fence


def test_sigint_stops_the_server_gracefully_too(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        with HttpStateStore(server.url, token=TOKEN) as store:
            assert store.list_runs() == []
        server.proc.send_signal(signal.SIGINT)
        assert server.proc.wait(timeout=DEADLINE_S) == 0
    finally:
        server.terminate()
    assert "Traceback" not in server.stderr()


def test_a_taken_port_is_exit_1_with_a_message(server: ServerProcess, tmp_path: Path) -> None:
    child = subprocess.run(
        serve_command(tmp_path / "other.db", "--port", str(server.port)),
        env=child_env(TOKEN),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert child.returncode == 1
    assert "zuke serve: cannot start" in child.stderr
    assert "Traceback" not in child.stderr


def test_a_file_that_is_not_a_database_is_exit_1_with_a_message(tmp_path: Path) -> None:
    db = tmp_path / "not-a.db"
    db.write_text("hello, I am a text file and not SQLite at all " * 20)
    child = subprocess.run(
        serve_command(db, "--port", "0"),
        env=child_env(TOKEN),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert child.returncode == 1
    assert "cannot use" in child.stderr and "not-a.db" in child.stderr
    assert "Traceback" not in child.stderr


def test_serve_refuses_to_run_outside_the_main_thread(tmp_path: Path) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            serve(db_path=tmp_path / "s.db", port=0, token=TOKEN)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=DEADLINE_S)
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "StateServer" in str(errors[0])


def test_the_main_module_serves_when_run_with_python_dash_m(tmp_path: Path) -> None:
    # `python -m zuke._serve --help` works and names the flags `zuke serve` keeps.
    child = subprocess.run(
        [sys.executable, "-m", "zuke._serve", "--help"],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=False,
    )
    assert child.returncode == 0
    for flag in ("--host", "--port", "--db", "--no-auth"):
        assert flag in child.stdout


# ------------------------------------------------------------------ in-process, ManualClock


def test_lock_expiry_is_judged_by_the_server_clock_alone(tmp_path: Path) -> None:
    clock = ManualClock()
    with (
        StateServer(db_path=tmp_path / "s.db", token=TOKEN, clock=clock) as server,
        HttpStateStore(server.url, token=TOKEN) as store,
    ):
        first = store.acquire_lock("k", HOLDER, 1_000)
        assert isinstance(first, LockAcquired)
        clock.advance(999)  # one millisecond short of expiry: still held
        assert isinstance(store.acquire_lock("k", HOLDER, 1_000), LockHeld)
        clock.advance(1)
        second = store.acquire_lock("k", HOLDER, 1_000)
        assert isinstance(second, LockAcquired)
        assert second.fence == first.fence + 1


def test_a_state_server_in_a_thread_stops_cleanly_with_requests_racing(tmp_path: Path) -> None:
    server = StateServer(db_path=tmp_path / "s.db", token=TOKEN)
    server.start()
    errors: list[BaseException] = []
    started = threading.Barrier(5)

    def hammer(i: int) -> None:
        with HttpStateStore(server.url, token=TOKEN, timeout_s=5) as store:
            started.wait()
            try:
                for n in range(1000):
                    store.create_run(record(f"r{i}-{n}"))
            except StoreUnavailableError:
                return  # the server went away: expected once it stops
            except BaseException as exc:
                errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    started.wait()
    server.stop()
    for t in threads:
        t.join(timeout=DEADLINE_S)
    assert errors == []
    assert not any(t.is_alive() for t in threads)
