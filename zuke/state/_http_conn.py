"""Plain ``http://`` keep-alive connections for the HTTP state store, without httpx.

A run's journal appends are small and serial (the engine awaits a target's
``running`` write before its body starts), so on a nearby service the
client's CPU per call is a large share of a chain's time. httpx spent about
0.25 ms of CPU a call in its model objects, its cookie jar, httpcore and h11,
and wrote a request's head and body as two ``send`` calls, each waking the
server. :class:`DirectConnections` writes each request as one ``send`` on a
pooled socket and reads the answer with the standard library's
:class:`http.client.HTTPResponse` (status line, headers, ``Content-Length``
or chunked bodies, ``Connection: close``): about 0.1 ms a call.

It serves only what it serves exactly as httpx did: ``http://`` with no proxy
configured in the environment (see :func:`direct_ok`). Anything else — https,
a proxy, an injected httpx transport — goes through httpx
(:mod:`zuke.state._http_client`). Like httpx, it never retries a request: an
idle connection the server has closed is noticed (it reads as ready) and
replaced before a request is written on it.
"""

from __future__ import annotations

import http.client
import os
import re
import select
import socket
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from zuke._errors import ZukeError

#: Environment variables with which httpx would send a plain-http request through a proxy.
_PROXY_VARIABLES = ("http_proxy", "all_proxy")
#: What may not appear in a header we write (it would end the header, or the head).
_BAD_HEADER = re.compile(r"[\x00\r\n]")
#: Idle connections kept per store (calls from one run are serial; a few threads share it).
MAX_IDLE = 4


def direct_ok(scheme: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether a request to ``scheme`` goes straight to the host, with no proxy httpx would use."""
    environ = os.environ if env is None else env
    proxied = any(environ.get(name) or environ.get(name.upper()) for name in _PROXY_VARIABLES)
    return scheme == "http" and not proxied


class TooLargeError(ZukeError):
    """The answer's body is larger than the caller's cap."""


class BadHeaderError(ZukeError, ValueError):
    """A header we were asked to send would break the request (a CR, LF or NUL in it)."""


@dataclass(frozen=True)
class Answer:
    """A status, headers (lower-case names, repeats joined with ``, ``) and the whole body."""

    status: int
    headers: dict[str, str]
    body: bytes


class DirectConnections:
    """Keep-alive sockets to one ``host:port``; thread-safe, one request per socket at a time."""

    def __init__(self, host: str, port: int) -> None:
        self._address = (host, port)
        shown = f"[{host}]" if ":" in host else host
        self._host_header = shown if port == 80 else f"{shown}:{port}"
        self._idle: list[socket.socket] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for sock in idle:
            sock.close()

    def exchange(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        *,
        timeout_s: float,
        max_body: int,
    ) -> Answer:
        """Send one request and read its whole answer; ``OSError`` or ``HTTPException`` if not.

        :class:`TooLargeError` if the body exceeds ``max_body``; the socket is
        then dropped, as on any failure.
        """
        request = self._request(method, target, headers, body)
        sock = self._checkout(timeout_s)
        try:
            try:
                sock.sendall(request)
                unsent: OSError | None = None
            except (BrokenPipeError, ConnectionResetError) as exc:
                # The server may have answered early and hung up (a 413 for a body
                # over its limit): read that answer, as httpx does, before failing.
                unsent = exc
            response = http.client.HTTPResponse(sock, method=method)
            try:
                try:
                    response.begin()
                except (OSError, http.client.HTTPException):
                    if unsent is not None:
                        raise unsent from None
                    raise
                data = _read(response, max_body)
                answer = Answer(response.status, _headers(response.msg), data)
                reusable = unsent is None and not response.will_close and response.isclosed()
            finally:
                response.close()
        except BaseException:
            sock.close()
            raise
        if reusable:
            self._checkin(sock)
        else:
            sock.close()
        return answer

    def _request(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        for name, value in headers.items():
            if _BAD_HEADER.search(name) or _BAD_HEADER.search(value):
                raise BadHeaderError(f"the {name.split(':')[0][:40]!r} header has a line break")
            lines.append(f"{name}: {value}")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    def _checkout(self, timeout_s: float) -> socket.socket:
        while True:
            with self._lock:
                sock = self._idle.pop() if self._idle else None
            if sock is None:
                break
            if _still_open(sock):
                sock.settimeout(timeout_s)
                return sock
            sock.close()
        sock = socket.create_connection(self._address, timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def _checkin(self, sock: socket.socket) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(sock)
                return
        sock.close()


def _still_open(sock: socket.socket) -> bool:
    """An idle socket is fit to reuse unless it reads as ready: closed by the server, or
    holding bytes nobody asked for."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def _read(response: http.client.HTTPResponse, max_body: int) -> bytes:
    if response.length is not None and response.length > max_body:
        raise TooLargeError
    data = response.read(max_body + 1)
    if len(data) > max_body:
        raise TooLargeError
    return data


def _headers(message: http.client.HTTPMessage) -> dict[str, str]:
    merged: dict[str, str] = {}
    for name, value in message.items():
        key = name.lower()
        merged[key] = f"{merged[key]}, {value}" if key in merged else value
    return merged


__all__ = ["Answer", "BadHeaderError", "DirectConnections", "TooLargeError", "direct_ok"]
