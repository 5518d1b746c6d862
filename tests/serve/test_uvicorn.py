"""``zuke serve`` on uvicorn, as a real process: deadlines, backlog, shutdown, the log.

The server runs with short timeouts (half a second) so a slow client is
dropped quickly. A "trickling" client sends one byte, waits up to 0.1 s for
the server to answer or hang up, and sends the next: a per-byte idle timeout
would never fire on it; only a deadline on the whole request does.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.serve.support import TOKEN, ServerProcess, running_server, start_server

DEADLINE_S = 15.0
TIMEOUT = "0.5"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    args = ["--request-timeout", TIMEOUT, "--keep-alive", TIMEOUT]
    with running_server(tmp_path_factory.mktemp("uvicorn"), args=args) as s:
        yield s


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=DEADLINE_S)


def trickle(sock: socket.socket, data: bytes) -> bytes:
    """Send ``data`` a byte at a time until the server answers or hangs up; what it sent.

    A server that closes while a byte it has not read is in flight resets the
    connection, and the reset can overtake its answer: that reads as ``b""``.
    """
    deadline = time.monotonic() + DEADLINE_S
    sock.settimeout(0.1)
    try:
        for byte in data:
            assert time.monotonic() < deadline, "the server kept a trickling client"
            try:
                answer = sock.recv(65536)
            except TimeoutError:
                sock.sendall(bytes([byte]))
                continue
            return answer + read_to_end(sock)
    except ConnectionError:
        return b""
    raise AssertionError("the whole request trickled through")


def read_to_end(sock: socket.socket) -> bytes:
    sock.settimeout(DEADLINE_S)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


def wait_for_log(server: ServerProcess, text: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while text not in server.stderr():
        assert time.monotonic() < deadline, server.stderr()


HEAD = f"PUT /runs/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"


def test_a_client_trickling_its_request_head_is_dropped(server: ServerProcess) -> None:
    with connect(server) as sock:
        answer = trickle(sock, (HEAD + "X-Padding: " + "p" * 10_000).encode())
    assert answer == b""  # hung up on, no answer
    wait_for_log(server, f"connection dropped (no complete request within {TIMEOUT}s)")


def test_a_client_trickling_its_body_gets_408_and_is_dropped(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(f"{HEAD}If-None-Match: *\r\nContent-Length: 10000\r\n\r\n".encode())
        answer = trickle(sock, b"{" * 10_000)
    wait_for_log(server, "zuke serve: PUT /runs/slow 408")
    if answer:  # unless a reset overtook it (see trickle)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
        assert b"connection: close" in answer.lower()


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout(
    server: ServerProcess,
) -> None:
    with connect(server) as sock:
        sock.sendall(
            f"GET /runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode()
        )
        answer = read_to_end(sock)  # returns only once the server closes the connection
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.count(b"HTTP/1.1") == 1


def test_the_token_is_checked_before_the_body_is_asked_for(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"PUT /runs/x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
            b"Content-Length: 100\r\nExpect: 100-continue\r\n\r\n"
        )
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 401"), answer[:200]  # no "100 Continue" first
    assert b'{"error":"unauthorized"}' in answer


def test_a_malformed_request_gets_a_json_400_and_one_log_line(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert answer.endswith(b'{"error":"bad request: not a valid HTTP/1.1 request"}')
    wait_for_log(server, "zuke serve: Invalid HTTP request received.")
    assert "Traceback" not in server.stderr()


def test_a_request_head_over_64_kib_gets_a_json_400_and_is_closed(
    server: ServerProcess,
) -> None:
    with connect(server) as sock:
        sock.sendall((HEAD + "X-Padding: " + "p" * 70_000).encode())  # no end of head
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert answer.endswith(b'{"error":"bad request: the request head is over 65536 bytes"}')
    wait_for_log(server, "zuke serve: request head larger than 65536 bytes")


def test_a_head_under_the_limit_and_a_large_body_sent_with_it_are_served(
    server: ServerProcess,
) -> None:
    # 60 KiB of headers, then a 200 KB body in the same write: only the head counts.
    padding = "X-Padding: " + "p" * 60_000 + "\r\n"
    body = b'{"x": "' + b"y" * 200_000 + b'"}'
    with connect(server) as sock:
        sock.sendall(
            f"{HEAD}{padding}If-None-Match: *\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + body
        )
        answer = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]  # read whole, judged by the app
    assert b"not a run record" in answer


def test_the_log_is_ours_alone(server: ServerProcess) -> None:
    reply = httpx.get(
        f"{server.url}/runs?status=running", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert reply.status_code == 200
    wait_for_log(server, "zuke serve: GET /runs 200")
    log = server.stderr()
    assert 'HTTP/1.1" 200' not in log  # uvicorn's access log is off
    assert "status=running" not in log  # the query is never logged
    assert all(line.startswith("zuke serve: ") for line in log.splitlines())


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss(8) to read the backlog")
def test_the_listen_backlog_is_2048(server: ServerProcess) -> None:
    listing = subprocess.run(
        ["ss", "-ltnH", f"sport = :{server.port}"], capture_output=True, text=True, check=True
    ).stdout.split()
    # State, Recv-Q, Send-Q (for a listening socket: its backlog), local address, ...
    assert listing[:3] == ["LISTEN", "0", "2048"], listing


def test_sigterm_does_not_wait_for_a_trickling_client_past_the_grace_period(
    tmp_path: Path,
) -> None:
    # The request timeout (60 s) would never end it: only the shutdown grace can.
    server = start_server(tmp_path, args=["--request-timeout", "60", "--shutdown-grace", TIMEOUT])
    try:
        with connect(server) as mid_body, connect(server) as mid_head:
            mid_head.sendall(HEAD.encode())
            expect = "If-None-Match: *\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"
            mid_body.sendall(f"{HEAD}{expect}".encode())
            # "100 Continue" means the app is reading the body: the request is in flight.
            assert mid_body.recv(100).startswith(b"HTTP/1.1 100")
            mid_body.sendall(b"{")
            wait_until_served(server)
            server.proc.terminate()
            assert server.proc.wait(timeout=DEADLINE_S) == 0
            assert read_to_end(mid_head) == b""
            rest = read_to_end(mid_body)
            assert rest == b"" or rest.startswith(b"HTTP/1.1 503"), rest[:200]
    finally:
        server.terminate()
    assert "Traceback" not in server.stderr()


def wait_until_served(server: ServerProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    assert httpx.get(f"{server.url}/runs", headers=headers, timeout=DEADLINE_S).status_code == 200
