"""Running ``zuke serve``: uvicorn on a bound socket, on a thread, until stopped.

This module owns the service's lifecycle. :class:`StateServer` opens the
database (:func:`~zuke._serve.db_choice.open_db`: a SQLite file, or Postgres for
``postgresql://``),
binds the listening socket itself (so the port is known, and a
taken port fails before anything else starts, with the listen backlog
configured), and runs uvicorn with :class:`~zuke._serve.protocol.StateProtocol`
on a background thread; :func:`serve` runs one in the foreground until
SIGTERM/SIGINT.

The timeouts, all in :class:`ServeLimits`: the request timeout (a request's
head, and separately its body, must arrive within it), the keep-alive
timeout (an idle connection is closed after it), and the shutdown grace: on
stop, the server stops accepting, closes idle connections, lets requests in
flight finish for at most that long (their answers say ``Connection:
close``), cancels what is left, then closes the database.

Signals are handled here, not by uvicorn: uvicorn re-raises a captured
SIGTERM after its shutdown, which would end the process with a signal
instead of exit code 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any, TextIO

import uvicorn

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import UsageError
from zuke._serve.app import StateApp
from zuke._serve.asgi import LineLog, StateAsgi
from zuke._serve.backend import ServeDb, shown_db
from zuke._serve.db_choice import check_db, open_db, pg_connections
from zuke._serve.protocol import ServeConfig, StateProtocol, line_logger
from zuke.state._http_wire import is_loopback_host

if TYPE_CHECKING:
    from zuke._serve.ui.live import LiveSettings

DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
TOKEN_ENV = "ZUKE_SERVE_TOKEN"
#: the web view's read-only token (it authorises nothing in the state API)
READ_TOKEN_ENV = "ZUKE_SERVE_READ_TOKEN"
START_TIMEOUT_S = 30.0
#: Worker threads for the app (SQLite calls block; writers queue on one lock anyway).
WORKERS = 8


@dataclass(frozen=True)
class ServeLimits:
    """The service's timeouts and queue sizes; the defaults suit a shared service."""

    request_timeout_s: float = 10.0  #: a request's head, and then its body, must arrive within this
    keep_alive_s: float = 5.0  #: an idle keep-alive connection is closed after this
    shutdown_grace_s: float = 10.0  #: requests in flight at a stop get this long to finish
    backlog: int = 2048  #: connections the kernel queues before the server accepts them
    max_head_bytes: int = 64 * 1024  #: the largest request line plus headers


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


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, saying when it serves, and never touching signals."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the caller owns the signals (see the module doc)


def _bind(host: str, port: int, backlog: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP, not 0: asyncio turns Nagle off only on sockets that say
    # TCP, and with it on, an answer's body waits ~40 ms for the client's ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    sock.set_inheritable(False)
    return sock


_Running = tuple[ServeDb, socket.socket, "_Uvicorn", threading.Thread, ThreadPoolExecutor]


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
        limits: ServeLimits = ServeLimits(),
        clock: Clock = SYSTEM_CLOCK,
        log: TextIO | None = None,
        ui: bool = True,
        read_token: str | None = None,
        ui_live: LiveSettings | None = None,
    ) -> None:
        self._token = check_auth_config(host=host, token=token, no_auth=no_auth)
        if read_token and self._token is None:
            raise UsageError(f"{READ_TOKEN_ENV} is set, but --no-auth needs no token: "
                             f"unset it, or set {TOKEN_ENV} and drop --no-auth")  # fmt: skip
        self._ui, self._ui_live, self._read_token = ui, ui_live, read_token or None
        self._ui_app: Any = None
        self._db_spec = check_db(db_path)
        self._host = host
        self._port = port
        self._max_body_bytes = max_body_bytes
        self._limits = limits
        self._clock = clock
        self._log = LineLog(log)
        self._stopping = threading.Event()
        self._running: _Running | None = None

    def __repr__(self) -> str:
        db = shown_db(self._db_spec)
        return f"StateServer(host={self._host!r}, port={self._port}, db={db!r})"

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._running is None:
            raise RuntimeError("StateServer is not started")
        return int(self._running[1].getsockname()[1])

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        """Open the database, bind, and serve on a background thread."""
        if self._running is not None:
            raise RuntimeError("StateServer already started")
        on_postgres = isinstance(self._db_spec, str)
        workers = pg_connections(os.environ) if on_postgres else WORKERS
        db = open_db(
            self._db_spec, clock=self._clock, wait_s=self._limits.request_timeout_s,
            connections=workers,
        )  # fmt: skip
        try:
            sock = _bind(self._host, self._port, self._limits.backlog)
        except BaseException:
            db.close()
            raise
        executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="zuke-serve")
        self._stopping.clear()
        server = _Uvicorn(self._config(db, executor))
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="zuke-serve", daemon=True
        )
        self._running = (db, sock, server, thread, executor)
        thread.start()
        # Connections queue in the backlog meanwhile; wait until uvicorn serves them.
        while not server.ready.wait(0.05):
            if not thread.is_alive():
                self.stop()
                raise RuntimeError("zuke serve: the HTTP server failed to start")

    def _config(self, db: ServeDb, executor: ThreadPoolExecutor) -> ServeConfig:
        limits = self._limits
        if self._ui:  # the web view at /ui/: jinja2 and its templates load only when it is on
            from zuke._serve.ui.routes import UiApp

            self._ui_app = UiApp(
                db, token=self._token, read_token=self._read_token, clock=self._clock,
                log=self._log, stopping=self._stopping.is_set,
                request_timeout_s=limits.request_timeout_s, live=self._ui_live,
            )  # fmt: skip
        app = StateAsgi(
            StateApp(db, token=self._token),
            max_body_bytes=self._max_body_bytes,
            request_timeout_s=limits.request_timeout_s,
            log=self._log,
            executor=executor,
            stopping=self._stopping.is_set,
            ui=self._ui_app,
        )
        return ServeConfig(
            app,
            request_timeout_s=limits.request_timeout_s,
            max_head_bytes=limits.max_head_bytes,
            log=self._log,
            http=StateProtocol,
            ws="none",
            lifespan="off",
            interface="asgi3",
            loop="asyncio",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            backlog=limits.backlog,
            timeout_keep_alive=limits.keep_alive_s,
            timeout_graceful_shutdown=limits.shutdown_grace_s,
        )

    def stop(self) -> None:
        """Stop accepting, finish in-flight requests (bounded), close the database. Idempotent."""
        running, self._running = self._running, None
        if running is None:
            return
        db, sock, server, thread, executor = running
        self._stopping.set()
        server.should_exit = True
        thread.join()
        sock.close()
        if self._ui_app is not None:
            self._ui_app.close()
        executor.shutdown(wait=True, cancel_futures=True)
        db.close()

    def force_stop(self) -> None:
        """Stop without waiting for requests in flight (a second signal)."""
        if self._running is not None:
            self._running[2].force_exit = True

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
    limits: ServeLimits = ServeLimits(),
    clock: Clock = SYSTEM_CLOCK,
    ready: Callable[[str], None] | None = None,
    ui: bool = True,
    read_token: str | None = None,
) -> None:
    """Serve the state API and (``ui``) the web view until SIGTERM or SIGINT; stop gracefully.

    ``ready(url)`` is called once the socket is bound and served. A second
    signal stops without waiting for requests in flight. Raises
    :class:`UsageError` for an unsafe auth configuration (see
    :func:`check_auth_config`) and ``OSError`` if the address cannot be bound.
    """
    server = StateServer(
        db_path=db_path, host=host, port=port, token=token, no_auth=no_auth,
        max_body_bytes=max_body_bytes, limits=limits, clock=clock, log=sys.stderr, ui=ui,
        read_token=read_token,
    )  # fmt: skip
    # Signals are what stop it, and only the main thread can install handlers.
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("serve() runs in the main thread; use StateServer elsewhere")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            server.force_stop()
        stop.set()

    # uvicorn's own messages (e.g. a grace period running out), one line each.
    uvicorn_log = line_logger(LineLog(sys.stderr))
    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    logger = _quiet_uvicorn(uvicorn_log)
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
        logger()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _quiet_uvicorn(replacement: logging.Logger) -> Callable[[], None]:
    """Route the ``uvicorn.error`` logger's records through ``replacement``; the undo."""
    target = logging.getLogger("uvicorn.error")
    saved = (target.handlers[:], target.propagate)
    target.handlers = list(replacement.handlers)
    target.propagate = False

    def undo() -> None:
        target.handlers, target.propagate = saved

    return undo


__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "READ_TOKEN_ENV",
    "TOKEN_ENV",
    "ServeLimits",
    "StateServer",
    "check_auth_config",
    "check_db",
    "open_db",
    "serve",
]
