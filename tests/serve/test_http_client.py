"""The HTTP store's own connections to a plain-http service (``zuke.state._http_conn``).

Each request is one write on a pooled keep-alive socket; a closed idle socket
is replaced; proxies in the environment and https still go through httpx.

Against ``zuke serve`` in process, and against a canned TCP server on
127.0.0.1 for answers ``zuke serve`` never gives (chunked bodies, ``Connection:
close``, silence, a proxy's view of a request).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.support import TOKEN
from zuke._errors import StoreUnavailableError
from zuke._serve import StateServer
from zuke._serve.server import ServeLimits
from zuke.state import _http_client
from zuke.state._http_conn import direct_ok
from zuke.state._protocol import RunQuery
from zuke.state.http import HttpStateStore
from zuke.state.records import GraphNode, RunRecord

DEADLINE_S = 15.0
JSON_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nx-zuke-state-protocol: 1\r\n"


def record(run_id: str) -> RunRecord:
    return RunRecord(
        id=run_id, build="B", root_target="deploy", status="running", actor="alice",
        created_at="2026-01-01T00:00:00.000Z", updated_at="2026-01-01T00:00:00.000Z",
        graph=(GraphNode("deploy"),),
    )  # fmt: skip


class Canned:
    """A TCP server answering each request with ``answer(request)``; ``None``: never answer."""

    def __init__(self, answer: Callable[[bytes], bytes | None]) -> None:
        self.answer = answer
        self.requests: list[bytes] = []
        self.connections = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def close(self) -> None:
        self._done.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self._listener.close()
        self._thread.join(DEADLINE_S)

    def _serve(self) -> None:
        while not self._done.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                self._connection(conn)

    def _connection(self, conn: socket.socket) -> None:
        buffer = b""
        while True:
            while b"\r\n\r\n" not in buffer:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = next(
                (int(line.split(b":")[1]) for line in head.split(b"\r\n")
                 if line.lower().startswith(b"content-length:")), 0,
            )  # fmt: skip
            while len(buffer) < length:
                buffer += conn.recv(65536)
            request, buffer = head + b"\r\n\r\n" + buffer[:length], buffer[length:]
            self.requests.append(request)
            reply = self.answer(request)
            if reply is None:
                conn.recv(1)  # hold the connection until the client gives up
                return
            conn.sendall(reply)
            if b"Connection: close" in reply:
                return


@pytest.fixture
def canned() -> Iterator[Callable[[Callable[[bytes], bytes | None]], Canned]]:
    servers: list[Canned] = []

    def start(answer: Callable[[bytes], bytes | None]) -> Canned:
        servers.append(Canned(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateServer]:
    limits = ServeLimits(keep_alive_s=0.2)
    db = tmp_path_factory.mktemp("client") / "state.db"
    with StateServer(db_path=db, token=TOKEN, limits=limits) as server:
        yield server


def namespace(server: StateServer) -> str:
    """A fresh, empty store on the shared server."""
    return f"{server.url}/ns/{uuid.uuid4().hex[:10]}"


class Recording:
    """Wraps the sockets ``_http_conn`` opens, keeping every ``sendall``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.writes: list[bytes] = []
        self.opened: list[socket.socket] = []
        connect = socket.create_connection

        def create_connection(address: Any, timeout: Any = None) -> Any:
            sock = connect(address, timeout=timeout)
            self.opened.append(sock)
            return _Spy(sock, self.writes)

        # _http_conn looks it up on the socket module at each connect.
        monkeypatch.setattr(socket, "create_connection", create_connection)


class _Spy:
    def __init__(self, sock: socket.socket, writes: list[bytes]) -> None:
        self._sock, self._writes = sock, writes

    def sendall(self, data: bytes) -> None:
        self._writes.append(bytes(data))
        self._sock.sendall(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def test_a_request_and_its_body_go_out_in_one_write(
    served: StateServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Recording(monkeypatch)
    with HttpStateStore(served.url, token=TOKEN) as store:
        run_id = f"r-{uuid.uuid4().hex[:10]}"
        store.create_run(record(run_id))
    (write,) = spy.writes
    head, _, body = write.partition(b"\r\n\r\n")
    assert head.startswith(f"PUT /runs/{run_id} HTTP/1.1\r\n".encode())
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body)["id"] == run_id


def test_calls_reuse_one_connection(served: StateServer, monkeypatch: pytest.MonkeyPatch) -> None:
    spy = Recording(monkeypatch)
    with HttpStateStore(served.url, token=TOKEN) as store:
        for _ in range(3):
            store.list_runs()
    assert len(spy.writes) == 3
    assert len(spy.opened) == 1


def test_an_idle_connection_the_server_closed_is_replaced_not_reused(
    served: StateServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = Recording(monkeypatch)
    with HttpStateStore(namespace(served), token=TOKEN) as store:
        store.list_runs()
        # The server closes it after its 0.2 s keep-alive: wait (with a deadline) to see EOF.
        (sock,) = spy.opened
        assert select.select([sock], [], [], DEADLINE_S)[0], "the server kept the connection"
        assert store.list_runs() == []
    assert len(spy.opened) == 2


def test_a_body_the_server_refuses_mid_send_still_gets_its_413(tmp_path: Path) -> None:
    # 20 MB is more than loopback's socket buffers hold: the server answers 413 and
    # hangs up while the body is still being written, so the write fails first.
    big = RunRecord(**{**vars(record("big")), "params": {"blob": "x" * 20_000_000}})
    with (
        StateServer(db_path=tmp_path / "state.db", token=TOKEN, max_body_bytes=1000) as server,
        HttpStateStore(server.url, token=TOKEN) as store,
        pytest.raises(StoreUnavailableError) as caught,
    ):
        store.create_run(big)
    assert "unexpected HTTP 413" in str(caught.value)
    assert "body larger than 1000 bytes" in str(caught.value)


def test_a_plain_http_store_never_imports_httpx(served: StateServer) -> None:
    script = (
        "import sys\n"
        "from zuke.state.http import HttpStateStore\n"
        f"with HttpStateStore({served.url!r}, token={TOKEN!r}) as store:\n"
        "    store.list_runs()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('httpx', 'httpcore')))\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True,
        timeout=DEADLINE_S,
    )  # fmt: skip
    assert out.stdout.strip() == "[]", out.stderr


def test_a_chunked_answer_that_closes_the_connection_is_read_whole_and_not_reused(
    canned: Callable[[Callable[[bytes], bytes | None]], Canned],
) -> None:
    chunked = (JSON_HEAD + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
               "1\r\n[\r\n1\r\n]\r\n0\r\n\r\n").encode()  # fmt: skip
    server = canned(lambda request: chunked)
    with HttpStateStore(server.url, token=TOKEN) as store:
        assert store.list_runs() == []
        assert store.list_runs() == []
    assert server.connections == 2


def test_an_oversized_answer_is_refused(
    canned: Callable[[Callable[[bytes], bytes | None]], Canned],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_http_client, "MAX_RESPONSE_BYTES", 10)
    server = canned(lambda request: (JSON_HEAD + "Content-Length: 11\r\n\r\n[1,2,3,4,5]").encode())
    with HttpStateStore(server.url) as store, pytest.raises(StoreUnavailableError) as caught:
        store.list_runs()
    assert "returned a body larger than 10 bytes" in str(caught.value)


def test_a_service_that_never_answers_times_out(
    canned: Callable[[Callable[[bytes], bytes | None]], Canned],
) -> None:
    server = canned(lambda request: None)
    with (
        HttpStateStore(server.url, timeout_s=0.2) as store,
        pytest.raises(StoreUnavailableError, match=r"GET /runs timed out after 0.2s"),
    ):
        store.list_runs()


def test_a_token_with_a_line_break_is_never_sent(
    canned: Callable[[Callable[[bytes], bytes | None]], Canned],
) -> None:
    server = canned(lambda request: b"")
    token = "secret-token\r\nX-Injected: 1"
    with (
        HttpStateStore(server.url, token=token) as store,
        pytest.raises(StoreUnavailableError) as caught,
    ):
        store.list_runs()
    assert "could not connect (BadHeaderError)" in str(caught.value)
    assert "secret-token" not in str(caught.value)
    assert server.requests == []


def test_a_proxy_in_the_environment_still_carries_plain_http_requests(
    canned: Callable[[Callable[[bytes], bytes | None]], Canned],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy = canned(lambda request: (JSON_HEAD + "Content-Length: 2\r\n\r\n[]").encode())
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with HttpStateStore("http://127.0.0.1:9/ns", token=TOKEN) as store:
        assert store.list_runs() == []
    (request,) = proxy.requests
    assert request.startswith(b"GET http://127.0.0.1:9/ns/runs HTTP/1.1\r\n")


def test_a_base_path_is_sent_percent_encoded_as_httpx_sent_it(
    canned: Callable[[Callable[[bytes], bytes | None]], Canned],
) -> None:
    server = canned(lambda request: (JSON_HEAD + "Content-Length: 2\r\n\r\n[]").encode())
    with HttpStateStore(f"{server.url}/team a/x%2Fy") as store:
        assert store.list_runs(RunQuery(status="failed")) == []
    (request,) = server.requests
    assert request.startswith(b"GET /team%20a/x%2Fy/runs?status=failed HTTP/1.1\r\n")


@pytest.mark.parametrize(
    ("scheme", "env", "direct"),
    [
        ("http", {}, True),
        ("https", {}, False),
        ("http", {"HTTP_PROXY": "http://proxy:3128"}, False),
        ("http", {"http_proxy": "http://proxy:3128"}, False),
        ("http", {"ALL_PROXY": "socks5://proxy:1080"}, False),
        ("http", {"HTTPS_PROXY": "http://proxy:3128"}, True),
        ("http", {"HTTP_PROXY": ""}, True),
    ],
)
def test_only_plain_http_without_a_proxy_goes_direct(
    scheme: str, env: dict[str, str], direct: bool
) -> None:
    assert direct_ok(scheme, env) is direct
