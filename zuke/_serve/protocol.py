"""uvicorn's HTTP/1.1 protocol (httptools), with the deadline and the log ``zuke serve`` needs.

uvicorn's protocol on httptools (llhttp, the C parser Node.js uses) costs
about 0.1 ms less CPU a request than its h11 one, a fifth of a small
request's server time. :class:`StateProtocol` adds what uvicorn leaves out:

* **a deadline on the request head**: uvicorn times out idle keep-alive
  connections, but nothing bounds how long a client may take to send a head,
  so one trickling a byte every 20 s would be held forever (and would hold up
  a graceful stop). From a connection's start, and from the first byte of
  each later request, the whole head must arrive within the request timeout,
  or the connection is dropped. (The body's deadline is the ASGI layer's,
  :mod:`zuke._serve.asgi`.)
* **a bound on the head's size** (httptools has none): past it, a 400 and the
  connection is closed.

It also keeps uvicorn's own messages to one ``zuke serve: …`` line each,
without tracebacks, answers a malformed request with the same short JSON
error as everything else, and sends an answer's head and body in one write.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from uvicorn import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
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

    def __init__(
        self, app: Any, *, request_timeout_s: float, max_head_bytes: int, log: LineLog,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(app, **kwargs)
        self.request_timeout_s = request_timeout_s
        self.max_head_bytes = max_head_bytes
        self.line_log = log
        self.line_logger = line_logger(log)


class StateProtocol(HttpToolsProtocol):
    """One client connection: httptools, plus the request head's deadline and size bound."""

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
        self.access_log = False  # one line per request is the ASGI layer's
        self._line_log = config.line_log
        self._head_timeout_s = config.request_timeout_s
        self._max_head_bytes = config.max_head_bytes
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_bytes = False  # some of the awaited head has arrived
        self._reading_head = True  # the next bytes belong to a request's head
        self._head_size = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        coalescing = _CoalescingTransport(transport, self.loop)
        super().connection_made(coalescing)  # type: ignore[arg-type]
        self._arm(received=False)

    def data_received(self, data: bytes) -> None:
        if self._reading_head:
            self._head_size += len(data)
        cycle = self.cycle
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.cycle is not cycle:
            self._disarm()  # a request's head is complete: the body has its own deadline
        elif self._reading_head and self._head_size > self._max_head_bytes:
            self._line_log.line(f"request head larger than {self._max_head_bytes} bytes")
            self._refuse(f"bad request: the request head is over {self._max_head_bytes} bytes")
        elif self._head_timer is None and self._between_requests():
            self._arm(received=True)  # the first bytes of a next request
        else:
            self._head_bytes = True

    def on_headers_complete(self) -> None:
        self._reading_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._reading_head, self._head_size = True, 0
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.cycle is not None and not self.cycle.response_complete:
            why = type(exc).__name__ if exc is not None else "closed by the client"
            self._line_log.line(f"connection dropped ({why})")
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        # A request httptools cannot parse; uvicorn has logged "Invalid HTTP
        # request received." through our logger.
        self._refuse("bad request: not a valid HTTP/1.1 request")

    def _refuse(self, reason: str) -> None:
        """Answer ``400 {"error": reason}`` unless an answer is under way, and hang up."""
        if self.cycle is None or self.cycle.response_complete:
            body = encode({"error": reason})
            headers = [
                ("Content-Type", "application/json"),
                *COMMON_HEADERS,
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
            ]
            head = "".join(f"{name}: {value}\r\n" for name, value in headers)
            self.transport.write(f"HTTP/1.1 400 Bad Request\r\n{head}\r\n".encode() + body)
        self._disarm()
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
