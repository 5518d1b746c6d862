"""``zuke serve`` as an ASGI application: the auth gate, body limits, the log line.

This module owns what happens between uvicorn handing over a request and
:class:`~zuke._serve.app.StateApp` answering it:

* the bearer token is checked from the headers, **before** any body is read
  (401, and the connection is closed);
* a body's size is judged from ``Content-Length`` before reading (413 over
  the limit, 411 without a length, both closing the connection), and the
  whole body must arrive within the request timeout (408 otherwise), so a
  client trickling bytes cannot hold a worker;
* the app runs on a small thread pool (SQLite calls block) — except a
  journal append (``PATCH``) that needs no waiting: the loop answers it
  itself, which saves two thread hand-offs (~0.1 ms) on the service's
  commonest request, and hands it to the pool if it would wait (see
  :mod:`zuke._serve.sqlite`);
* one log line per request, ``zuke serve: METHOD PATH STATUS`` — the path
  without its query, never a token, a header or a body.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import Executor
from typing import Any, TextIO

from zuke._errors import StoreUnavailableError
from zuke._serve.answers import COMMON_HEADERS, UNAUTHORIZED, Request, Response, error_response
from zuke._serve.app import StateApp
from zuke._serve.sqlite import DbClosedError, WouldWait
from zuke.state._http_wire import PROTOCOL_HEADER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class LineLog:
    """Thread-safe ``zuke serve: …`` lines to a text stream, or nowhere."""

    def __init__(self, stream: TextIO | None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        if self._stream is None:
            return
        with self._lock:
            try:
                self._stream.write(f"zuke serve: {text}\n")
                self._stream.flush()
            except (OSError, ValueError):  # a closed or broken stream: the log is best-effort
                pass


def shown_path(raw: str) -> str:
    """A path fit for the log: no query, printable, at most 200 characters."""
    path = raw.split("?", 1)[0][:200] or "-"
    return "".join(c if c.isprintable() and c != " " else "?" for c in path)


class StateAsgi:
    """The ASGI callable uvicorn serves."""

    def __init__(
        self,
        app: StateApp,
        *,
        max_body_bytes: int,
        request_timeout_s: float,
        log: LineLog,
        executor: Executor,
        stopping: Callable[[], bool],
        ui: Callable[[Scope, Receive, Send], Awaitable[None]] | None = None,
    ) -> None:
        self._app = app
        self._ui = ui  # the web view (zuke/_serve/ui): /ui and below, before the token gate
        self._max_body_bytes = max_body_bytes
        self._request_timeout_s = request_timeout_s
        self._log = log
        self._executor = executor
        self._stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan is off; nothing else is served
            return
        if self._ui is not None and scope["path"].split("/", 2)[1:2] == ["ui"]:
            await self._ui(scope, receive, send)  # its own sessions; never the state API
            return
        method: str = scope["method"]
        # raw_path is the path as sent: routing splits it before percent-decoding.
        path = bytes(scope.get("raw_path") or scope["path"].encode()).decode("latin-1")
        query = bytes(scope["query_string"]).decode("latin-1")
        headers = {bytes(k).decode("latin-1"): bytes(v).decode("latin-1")
                   for k, v in scope["headers"]}  # fmt: skip
        target = path + ("?" + query if query else "")
        try:
            answer = await self._answer(method, target, headers, receive)
        except asyncio.CancelledError:  # the shutdown's grace period ran out
            answer = (error_response(503, "shutting down"), True)
        if answer is None:
            return  # the client went away mid-body; the protocol logged it
        response, close = answer
        await _send(send, response, close=close or self._stopping())
        self._log.line(f"{method} {shown_path(path)} {response.status}")

    async def _answer(
        self, method: str, target: str, headers: dict[str, str], receive: Receive
    ) -> tuple[Response, bool] | None:
        """The response and whether to close the connection; ``None`` if the client left."""
        # Auth first, before the body is read and before any route is revealed.
        if not self._app.authorized(headers):
            return UNAUTHORIZED, True
        body = await self._read_body(headers, receive)
        if body is None or isinstance(body, Response):
            return None if body is None else (body, True)
        request = Request(method, target, headers, body)
        loop = asyncio.get_running_loop()
        try:
            if method == "PATCH":
                with contextlib.suppress(WouldWait):
                    return self._app.handle_promptly(request), False
            return await loop.run_in_executor(self._executor, self._app.handle, request), False
        except Exception as exc:  # one bad request must not take the service down
            if isinstance(exc, DbClosedError) or self._stopping():
                return error_response(503, "shutting down"), True
            if isinstance(exc, StoreUnavailableError):  # the database, not the request
                self._log.line(f"{method} {shown_path(target)}: {exc}")  # no password in it
                return error_response(503, "the state database is unavailable"), True
            self._log.line(f"error {type(exc).__name__} handling {method} {shown_path(target)}")
            return error_response(500, "internal error"), True

    async def _read_body(
        self, headers: dict[str, str], receive: Receive
    ) -> bytes | Response | None:
        if "transfer-encoding" in headers:
            return error_response(411, "send a Content-Length (chunked bodies are not accepted)")
        length_text = headers.get("content-length", "0").strip()
        if not (length_text.isascii() and length_text.isdigit()):
            return error_response(400, "bad Content-Length")
        length = int(length_text)
        if length > self._max_body_bytes:
            return error_response(413, f"body larger than {self._max_body_bytes} bytes")
        if length == 0:
            return b""
        body = bytearray()
        try:
            async with asyncio.timeout(self._request_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    body += message.get("body", b"")
                    if len(body) > length or not message.get("more_body", False):
                        break
        except TimeoutError:
            return error_response(
                408, f"the request body did not arrive within {self._request_timeout_s:g}s"
            )
        if len(body) != length:
            return error_response(400, "body length differs from Content-Length")
        return bytes(body)


async def _send(send: Send, response: Response, *, close: bool) -> None:
    headers = response.headers
    if not any(name.lower() == PROTOCOL_HEADER for name, _ in headers):
        headers = headers + COMMON_HEADERS
    raw = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers]
    raw.append((b"Content-Length", str(len(response.body)).encode()))
    if close:
        raw.append((b"Connection", b"close"))
    await send({"type": "http.response.start", "status": response.status, "headers": raw})
    await send({"type": "http.response.body", "body": response.body})


__all__ = ["LineLog", "StateAsgi", "shown_path"]
