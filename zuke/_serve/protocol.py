"""uvicorn's HTTP/1.1 protocol (h11), with the deadline and the log ``zuke serve`` needs.

uvicorn times out idle keep-alive connections, but nothing bounds how long a
client may take to send a request's head: a connection that trickles one
byte every 20 s would be held forever (and would hold up a graceful stop).
:class:`StateProtocol` adds that deadline: from a connection's start, and
from the first byte of each later request, the whole request head must
arrive within the request timeout, or the connection is dropped. (The body's
deadline is the ASGI layer's, :mod:`zuke._serve.asgi`; the head's size is
bounded by h11's incomplete-event limit.)

It also keeps uvicorn's own messages to one ``zuke serve: …`` line each,
without tracebacks, answers a malformed request with the same short JSON
error as everything else, and sends an answer's head and body in one write.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import h11
from uvicorn import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from zuke._serve.answers import COMMON_HEADERS
from zuke._serve.asgi import LineLog
from zuke._serve.jsontext import encode


class _LineHandler(logging.Handler):
    """uvicorn's log records as one line each: the message's first line, no traceback."""

    def __init__(self, log: LineLog) -> None:
        super().__init__(logging.WARNING)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = (record.getMessage().strip().splitlines() or ["?"])[0]
        except Exception:  # a record that does not format is still one line
            message = str(record.msg)[:200]
        exc = record.exc_info[1] if record.exc_info else None
        self._log.line(message + (f" ({type(exc).__name__})" if exc is not None else ""))


def line_logger(log: LineLog) -> logging.Logger:
    """A private logger (not in logging's registry) that writes to ``log``."""
    logger = logging.Logger("zuke.serve.http", logging.WARNING)
    logger.propagate = False
    logger.addHandler(_LineHandler(log))
    return logger


class _CoalescingTransport:
    """A transport whose writes within one turn of the event loop go out as one ``send``.

    uvicorn writes an answer's head and its body separately; on loopback each
    ``send`` costs a wake-up of the peer, so two of them per answer were a
    measurable share of a small request's cost.
    """

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def flush(self) -> None:
        if self._pending:
            data, self._pending = b"".join(self._pending), []
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class ServeConfig(Config):
    """uvicorn's config plus what :class:`StateProtocol` reads."""

    def __init__(self, app: Any, *, request_timeout_s: float, log: LineLog, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.request_timeout_s = request_timeout_s
        self.line_log = log
        self.line_logger = line_logger(log)


class StateProtocol(H11Protocol):
    """One client connection: h11, plus the request-head deadline."""

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        assert isinstance(config, ServeConfig)
        self.logger = config.line_logger
        self._line_log = config.line_log
        self._head_timeout_s = config.request_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        coalescing = _CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)  # type: ignore[arg-type]
        self._arm(received=False)

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:
            self._disarm()  # a request's head is complete: the body has its own deadline
        elif self._head_timer is None and self._between_requests():
            self._arm(received=True)  # the first bytes of a next request
        else:
            self._head_bytes = True

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            why = type(exc).__name__ if exc is not None else "closed by the client"
            self._line_log.line(f"connection dropped ({why})")
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        # A request h11 cannot parse (bad request line, a head over the size limit);
        # uvicorn has logged "Invalid HTTP request received." through our logger.
        headers = [
            (b"Content-Type", b"application/json"),
            *((name.encode(), value.encode()) for name, value in COMMON_HEADERS),
            (b"Connection", b"close"),
        ]
        body = encode({"error": "bad request: not a valid HTTP/1.1 request"})
        try:
            for event in (
                h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
                h11.Data(data=body),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event) or b"")
        except h11.LocalProtocolError:  # already mid-answer: just hang up
            pass
        self.transport.close()

    def _between_requests(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self, *, received: bool) -> None:
        self._disarm()
        self._head_bytes = received
        self._head_timer = self.loop.call_later(self._head_timeout_s, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._between_requests() or self.transport.is_closing():
            return
        if self._head_bytes:
            self._line_log.line(
                f"connection dropped (no complete request within {self._head_timeout_s:g}s)"
            )
        self.transport.close()


__all__ = ["ServeConfig", "StateProtocol", "line_logger"]
