"""The web view's HTTP plumbing: a request read from ASGI, an answer with its safety headers.

Every HTML answer carries a strict Content-Security-Policy — scripts,
styles, images and connections from this origin only, no inline script or
style at all (the page script is a file; the SVG is styled by classes), no
framing, forms posting only here — and ``nosniff``, ``no-store``, a
same-origin referrer policy. Nothing a page loads leaves the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, quote

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SAFETY_HEADERS: tuple[tuple[str, str], ...] = (
    ("Content-Security-Policy", CSP),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "same-origin"),
    ("X-Frame-Options", "DENY"),
    ("Cross-Origin-Opener-Policy", "same-origin"),
    ("Cross-Origin-Resource-Policy", "same-origin"),
)
HTML = ("Content-Type", "text/html; charset=utf-8")
NO_STORE = ("Cache-Control", "no-store")
#: the largest form the view accepts (a login: a token and two short fields)
MAX_FORM_BYTES = 16 * 1024


@dataclass(frozen=True)
class UiRequest:
    method: str
    path: str  #: percent-decoded
    query: str
    params: dict[str, str]  #: the query's first value of each name
    headers: Mapping[str, str]  #: keys lower-case

    @property
    def target(self) -> str:
        """The path and query as a link back to this page (the path encoded again)."""
        return quote(self.path, safe="/") + (f"?{self.query}" if self.query else "")


@dataclass(frozen=True)
class UiResponse:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = field(default=())


def request_of(scope: Scope) -> UiRequest:
    query = bytes(scope.get("query_string", b"")).decode("latin-1")
    headers = {bytes(k).decode("latin-1").lower(): bytes(v).decode("latin-1")
               for k, v in scope["headers"]}  # fmt: skip
    return UiRequest(method=scope["method"], path=scope["path"], query=query,
                     params=first_values(query), headers=headers)  # fmt: skip


def first_values(query: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(query, keep_blank_values=True).items() if v}


def html(status: int, text: str, *headers: tuple[str, str]) -> UiResponse:
    return UiResponse(status, text.encode(), (HTML, NO_STORE, *SAFETY_HEADERS, *headers))


def redirect(location: str, *headers: tuple[str, str], status: int = 303) -> UiResponse:
    return UiResponse(status, b"", (("Location", location), NO_STORE, *SAFETY_HEADERS, *headers))


def plain(status: int, text: str) -> UiResponse:
    return UiResponse(status, text.encode(), (("Content-Type", "text/plain; charset=utf-8"),
                                              NO_STORE, *SAFETY_HEADERS))  # fmt: skip


async def read_form(
    headers: Mapping[str, str], receive: Receive, *, timeout_s: float
) -> dict[str, str] | None:
    """A posted ``application/x-www-form-urlencoded`` body's fields; ``None`` if it is not
    one, too large, late, or the client left."""
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    length = headers.get("content-length", "").strip()
    if kind != "application/x-www-form-urlencoded" or not (length.isascii() and length.isdigit()):
        return None
    if int(length) > MAX_FORM_BYTES:
        return None
    body = bytearray()
    try:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return None
                body += message.get("body", b"")
                if len(body) > MAX_FORM_BYTES or not message.get("more_body", False):
                    break
    except TimeoutError:
        return None
    if len(body) != int(length):
        return None
    try:
        return first_values(body.decode("utf-8"))
    except UnicodeDecodeError:
        return None


async def send_response(send: Send, response: UiResponse, *, close: bool) -> None:
    raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers]
    raw.append((b"Content-Length", str(len(response.body)).encode()))
    if close:
        raw.append((b"Connection", b"close"))
    await send({"type": "http.response.start", "status": response.status, "headers": raw})
    await send({"type": "http.response.body", "body": response.body})


__all__ = [
    "CSP",
    "SAFETY_HEADERS",
    "Receive",
    "Scope",
    "Send",
    "UiRequest",
    "UiResponse",
    "first_values",
    "html",
    "plain",
    "read_form",
    "redirect",
    "request_of",
    "send_response",
]
