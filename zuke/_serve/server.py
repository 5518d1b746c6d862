"""The HTTP side of ``zuke serve``: sockets, limits, auth gate, logging, lifecycle.

This module owns everything between the socket and :class:`StateApp`: it
checks the bearer token before reading a body, refuses bodies that are too
large (413, judged from ``Content-Length`` before reading) or have no length
(411), writes one log line per request (method, path, status — never a token,
a query or a body), and shuts down gracefully: stop accepting, let in-flight
requests finish, wake idle keep-alive connections, then close the database.

:class:`StateServer` runs in a background thread (tests use it directly);
:func:`serve` runs one in the foreground until SIGTERM/SIGINT.
"""

from __future__ import annotations

import contextlib
import select
import signal
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import UsageError
from zuke._serve.app import (
    COMMON_HEADERS,
    UNAUTHORIZED,
    Request,
    Response,
    StateApp,
    error_response,
)
from zuke._serve.db import DbClosedError, StateDb
from zuke.state._http_wire import PROTOCOL_HEADER, is_loopback_host

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
TOKEN_ENV = "ZUKE_SERVE_TOKEN"


def check_auth_config(*, host: str, token: str | None, no_auth: bool) -> str | None:
    """The token to require, or ``None`` for no auth; :class:`UsageError` if unsafe.

    Without a token the service answers anyone who can reach it, so that is
    allowed only on a loopback address and only when asked for explicitly.
    """
    loopback = is_loopback_host(host)
    if no_auth:
        if not loopback:
            raise UsageError(
                f"--no-auth is only allowed on a loopback host (127.0.0.1, ::1, localhost), "
                f"not {host!r}: set {TOKEN_ENV} instead"
            )
        return None
    if not token:
        where = " (or pass --no-auth to serve this loopback address without auth)"
        raise UsageError(
            f"set {TOKEN_ENV} to the bearer token clients must send (their ZUKE_STATE_TOKEN)"
            + (where if loopback else "")
        )
    return token


class _Connections:
    """Open connections and whether each is mid-request, for a graceful stop."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy: dict[socket.socket, bool] = {}

    def opened(self, sock: socket.socket) -> None:
        with self._cond:
            self._busy[sock] = False

    def begin(self, sock: socket.socket) -> None:
        with self._cond:
            self._busy[sock] = True

    def end(self, sock: socket.socket) -> None:
        with self._cond:
            self._busy[sock] = False
            self._cond.notify_all()

    def closed(self, sock: socket.socket) -> None:
        with self._cond:
            self._busy.pop(sock, None)
            self._cond.notify_all()

    def drain(self, timeout_s: float) -> None:
        """Wake idle connections and wait (bounded) until every connection is gone."""
        with self._cond:
            for sock, busy in self._busy.items():
                if not busy and not _has_unread_bytes(sock):
                    # Shutting the read side ends a handler blocked waiting for
                    # the next request; bytes already received stay readable, and
                    # a handler that already read a request can still answer it.
                    with contextlib.suppress(OSError):
                        sock.shutdown(socket.SHUT_RD)
            self._cond.wait_for(lambda: not self._busy, timeout=timeout_s)


def _has_unread_bytes(sock: socket.socket) -> bool:
    """Whether bytes (a request, or EOF) have arrived that the handler has not read yet."""
    # A zero-timeout poll, not recv(MSG_PEEK): a socket with a timeout would wait.
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(0))


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        *,
        app: StateApp,
        max_body_bytes: int,
        log: TextIO | None,
    ) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, _Handler)
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.log = log
        self.log_lock = threading.Lock()
        self.connections = _Connections()
        self.stopping = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        # The stdlib prints a traceback (a client hanging up mid-answer, say);
        # one line without request text is all the log may say.
        exc = sys.exc_info()[1]
        if self.log is not None:
            with self.log_lock, contextlib.suppress(OSError, ValueError):
                self.log.write(f"zuke serve: connection dropped ({type(exc).__name__})\n")
                self.log.flush()


class _Handler(BaseHTTPRequestHandler):
    server: _HttpServer
    protocol_version = "HTTP/1.1"
    server_version = "zuke-serve"
    sys_version = ""
    timeout = 60  # an idle keep-alive connection is dropped after this long
    # Headers and body leave in two writes; with Nagle on, the body waits for
    # the client's delayed ACK (~40 ms a request).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.server.connections.opened(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.connections.closed(self.connection)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        finally:
            self.server.connections.end(self.connection)

    def parse_request(self) -> bool:
        # A request is in flight from its first line on: a graceful stop waits
        # for it (and a client sending "Expect: 100-continue" sees the 100 only
        # after this point).
        self.server.connections.begin(self.connection)
        return super().parse_request()

    def do_GET(self) -> None:
        self._send(self._respond())

    do_PUT = do_POST = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_GET

    def _respond(self) -> Response:
        server = self.server
        headers = {k.lower(): v for k, v in self.headers.items()}
        # Auth first, before the body is read and before any route is revealed.
        if not server.app.authorized(headers):
            self.close_connection = True
            return UNAUTHORIZED
        body = self._read_body(headers)
        if isinstance(body, Response):
            self.close_connection = True
            return body
        try:
            return server.app.handle(Request(self.command, self.path, headers, body))
        except Exception as exc:  # one bad request must not kill the connection's thread
            if isinstance(exc, DbClosedError) or server.stopping:
                # The database closed under a straggler after the drain gave up.
                self.close_connection = True
                return error_response(503, "shutting down")
            self._log(f"error {type(exc).__name__} handling {self.command} {self._shown_path()}")
            return error_response(500, "internal error")

    def _read_body(self, headers: dict[str, str]) -> bytes | Response:
        if "transfer-encoding" in headers:
            return error_response(411, "send a Content-Length (chunked bodies are not accepted)")
        length_text = headers.get("content-length", "0").strip()
        if not length_text.isdigit():
            return error_response(400, "bad Content-Length")
        length = int(length_text)
        if length > self.server.max_body_bytes:
            return error_response(413, f"body larger than {self.server.max_body_bytes} bytes")
        body = self.rfile.read(length) if length else b""
        if len(body) != length:
            return error_response(400, "body shorter than Content-Length")
        return body

    def _send(self, response: Response) -> None:
        if self.server.stopping:
            self.close_connection = True
        self.send_response(response.status)
        headers = response.headers
        if not any(name.lower() == PROTOCOL_HEADER for name, _ in headers):
            headers = headers + COMMON_HEADERS
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(response.body)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD" and response.body:
            self.wfile.write(response.body)
        self.wfile.flush()

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # Parse failures (bad request line, headers too long, unknown method) get
        # the same short JSON answer as everything else, never the HTML page.
        self.close_connection = True
        self._send(error_response(code, "bad request" if code < 500 else "not implemented"))

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self._log(f"{getattr(self, 'command', None) or '-'} {self._shown_path()} {code}")

    def log_message(self, format: str, *args: Any) -> None:
        # The stdlib's own messages (timeouts, parse errors) carry request text: dropped.
        return

    def _shown_path(self) -> str:
        path = (getattr(self, "path", None) or "-").split("?", 1)[0]
        return "".join(c if c.isprintable() and c != " " else "?" for c in path[:200])

    def _log(self, line: str) -> None:
        log = self.server.log
        if log is None:
            return
        with self.server.log_lock:
            try:
                log.write(f"zuke serve: {line}\n")
                log.flush()
            except (OSError, ValueError):
                pass


class StateServer:
    """A state service on a background thread: ``start()``, ``url``, ``stop()``."""

    def __init__(
        self,
        *,
        db_path: str | Path,
        host: str = "127.0.0.1",
        port: int = 0,
        token: str | None = None,
        no_auth: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        clock: Clock = SYSTEM_CLOCK,
        log: TextIO | None = None,
    ) -> None:
        self._token = check_auth_config(host=host, token=token, no_auth=no_auth)
        self._db_path = Path(db_path)
        self._host = host
        self._port = port
        self._max_body_bytes = max_body_bytes
        self._clock = clock
        self._log = log
        self._db: StateDb | None = None
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"StateServer(host={self._host!r}, port={self._port}, db={str(self._db_path)!r})"

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._httpd is None:
            raise RuntimeError("StateServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Open the database, bind, and serve on a background thread."""
        if self._httpd is not None:
            raise RuntimeError("StateServer already started")
        db = StateDb(self._db_path, clock=self._clock)
        try:
            httpd = _HttpServer(
                (self._host, self._port),
                app=StateApp(db, token=self._token),
                max_body_bytes=self._max_body_bytes,
                log=self._log,
            )
        except BaseException:
            db.close()
            raise
        self._db, self._httpd = db, httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="zuke-serve"
        )
        self._thread.start()

    def stop(self, *, drain_timeout_s: float = 10.0) -> None:
        """Stop accepting, finish in-flight requests, close the database. Idempotent."""
        httpd, db, thread = self._httpd, self._db, self._thread
        if httpd is None or db is None or thread is None:
            return
        httpd.stopping = True
        httpd.shutdown()  # serve_forever returns: no new connections are accepted
        thread.join()
        httpd.server_close()
        httpd.connections.drain(drain_timeout_s)
        db.close()
        self._httpd = self._db = self._thread = None

    def __enter__(self) -> StateServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    *,
    host: str = "127.0.0.1",
    port: int = 8780,
    db_path: str | Path = "zuke-state.db",
    token: str | None,
    no_auth: bool = False,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    clock: Clock = SYSTEM_CLOCK,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve the state API until SIGTERM or SIGINT, then shut down gracefully.

    ``ready(url)`` is called once the socket is bound. Raises
    :class:`UsageError` for an unsafe auth configuration (see
    :func:`check_auth_config`) and ``OSError`` if the address cannot be bound.
    """
    server = StateServer(
        db_path=db_path,
        host=host,
        port=port,
        token=token,
        no_auth=no_auth,
        max_body_bytes=max_body_bytes,
        clock=clock,
        log=sys.stderr,
    )
    # Signals are what stop it, and only the main thread can install handlers.
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("serve() runs in the main thread; use StateServer elsewhere")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        server.start()
        try:
            if ready is not None:
                ready(server.url)
            # Wait in slices: the kernel may deliver SIGTERM to a worker thread,
            # and Python runs signal handlers only when the main thread wakes up.
            while not stop.wait(0.1):
                pass
        finally:
            server.stop()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["DEFAULT_MAX_BODY_BYTES", "TOKEN_ENV", "StateServer", "check_auth_config", "serve"]
