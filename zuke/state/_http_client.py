"""The HTTP state store's transport: one request in, one checked, closed reply out.

This module owns the mechanics every call of
:class:`~zuke.state.http.HttpStateStore` shares: the ``httpx.Client`` (its
transport injectable for tests), the protocol header, bearer auth, reading a
response body with a size cap and closing it on every path, and the failures
that mean the same thing whatever the call (connection errors and timeouts,
5xx, a refused token, a protocol mismatch). :mod:`zuke.state.http` decides
what each status means for its call.

Secrets: the token lives only inside :class:`_BearerAuth`, which never
formats it; credentials in a ``user:pass@`` URL are moved into basic auth and
redacted from every message.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from zuke._errors import StateError, StoreUnavailableError
from zuke.state._http_wire import PROTOCOL_HEADER, PROTOCOL_VERSION, STATE_URL_ENV, redact_url

# A run record is kilobytes; anything this large is a misbehaving service.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024


class _BearerAuth(httpx.Auth):
    """Adds the bearer token; set as the client's auth so it wins over URL userinfo."""

    def __init__(self, token: str) -> None:
        self._token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request

    def __repr__(self) -> str:
        return "_BearerAuth(<redacted>)"


@dataclass(frozen=True)
class Reply:
    """A fully read, already closed response; ``call`` is e.g. ``GET /runs/abc``."""

    call: str
    status: int
    headers: httpx.Headers
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def _split_base(url: str) -> tuple[str, httpx.Auth | None]:
    """The base URL without userinfo or trailing slashes, and basic auth from the userinfo."""
    try:
        parts = urlsplit(url)
        host_ok = bool(parts.hostname)
    except ValueError:
        host_ok = False
    if not host_ok or parts.scheme.lower() not in ("http", "https"):
        raise StateError(f"state: {redact_url(url)} is not an http(s) URL with a host")
    if parts.query or parts.fragment:
        raise StateError(f"state: {redact_url(url)} must not carry a query or fragment")
    auth: httpx.Auth | None = None
    netloc = parts.netloc
    if "@" in netloc:
        # Moved out of the URL so that no URL we format or log carries them.
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        auth = httpx.BasicAuth(user, password)
    base = urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))
    return base, auth


class Wire:
    """Sends requests to one state service and checks what every reply must satisfy."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        transport: httpx.BaseTransport | None,
        timeout_s: float,
    ) -> None:
        self.shown_url = redact_url(url).rstrip("/")
        self._base, basic = _split_base(url)
        self.has_token = bool(token)
        self._timeout_s = timeout_s
        self._client = httpx.Client(
            auth=_BearerAuth(token) if token else basic,
            transport=transport,
            timeout=timeout_s,
            headers={PROTOCOL_HEADER: PROTOCOL_VERSION, "Accept": "application/json"},
            follow_redirects=False,
        )

    @property
    def timeout_s(self) -> float:
        """The client's request timeout."""
        return self._timeout_s

    def close(self) -> None:
        self._client.close()

    def send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        handles: frozenset[int] = frozenset(),
        timeout_s: float | None = None,
    ) -> Reply:
        """One request; its body read (capped) and the response closed on every path.

        ``handles``: statuses the caller interprets itself, exempt from the
        shared server-error check (PATCH's 501 means "no PATCH here").
        ``timeout_s`` overrides the client's timeout for this request.
        """
        timeout = self._timeout_s if timeout_s is None else timeout_s
        call = f"{method} {path}"
        content = None if body is None else json.dumps(body).encode()
        send_headers = dict(headers or {})
        if content is not None:
            send_headers["Content-Type"] = "application/json"
        request = self._client.build_request(
            method,
            self._base + path,
            content=content,
            headers=send_headers,
            params=params,
            timeout=timeout,
        )
        try:
            response = self._client.send(request, stream=True)
            try:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise StoreUnavailableError(
                            f"state: {call} returned a body larger than {MAX_RESPONSE_BYTES} "
                            f"bytes; is {STATE_URL_ENV} a Zuke state service?"
                        )
                    chunks.append(chunk)
            finally:
                response.close()
        except httpx.TimeoutException:
            raise self.unavailable(call, f"timed out after {timeout:g}s") from None
        except httpx.HTTPError as exc:
            # The exception's text is not shown: it is the transport's, not ours to vet.
            raise self.unavailable(call, f"could not connect ({type(exc).__name__})") from None
        reply = Reply(call, response.status_code, response.headers, b"".join(chunks))
        self._check_common(reply, handles)
        return reply

    def unavailable(self, call: str, what: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"state: {call} {what}. Is the state service at {self.shown_url} up? "
            f"Check {STATE_URL_ENV}."
        )

    def _check_common(self, reply: Reply, handles: frozenset[int]) -> None:
        """Failures every call shares: protocol mismatch, refused token, server errors."""
        echoed = reply.headers.get(PROTOCOL_HEADER)
        if echoed is not None and echoed.strip() != PROTOCOL_VERSION:
            raise StoreUnavailableError(
                f"state: {reply.call}: state-api protocol mismatch: the service at "
                f"{self.shown_url} speaks protocol {echoed[:20]!r}, this client speaks "
                f"{PROTOCOL_VERSION!r}. Upgrade the older side."
            )
        if reply.status in (401, 403):
            # The server's body is not shown: it might echo what we sent.
            advice = (
                "the state service refused the token; check ZUKE_STATE_TOKEN"
                if self.has_token
                else "the state service requires a token; set ZUKE_STATE_TOKEN"
            )
            raise StoreUnavailableError(f"state: {reply.call} got HTTP {reply.status}: {advice}.")
        if reply.status >= 500 and reply.status not in handles:
            raise self.unavailable(reply.call, f"failed with HTTP {reply.status}")

    def unexpected(self, reply: Reply) -> StoreUnavailableError:
        """The error for a status the call does not expect (with a server's short reason)."""
        detail = ""
        try:
            raw = json.loads(reply.body)
        except (ValueError, RecursionError):
            raw = None
        if isinstance(raw, dict) and isinstance(raw.get("error"), str):
            detail = f" ({raw['error'][:200]})"
        return StoreUnavailableError(
            f"state: {reply.call} got unexpected HTTP {reply.status} from the state service at "
            f"{self.shown_url}{detail}"
        )

    @staticmethod
    def bad_body(reply: Reply, what: str, *, detail: str | None = None) -> StoreUnavailableError:
        suffix = f" ({detail})" if detail else ""
        return StoreUnavailableError(
            f"state: {reply.call} returned a body that is not {what}{suffix}"
        )

    def json(self, reply: Reply, what: str) -> Any:
        try:
            return json.loads(reply.body)
        except (ValueError, RecursionError):
            raise self.bad_body(reply, what) from None

    @staticmethod
    def etag(reply: Reply) -> str:
        etag: str | None = reply.headers.get("etag")
        if not etag:
            raise StoreUnavailableError(
                f"state: {reply.call} answered HTTP {reply.status} without an ETag header; "
                "a Zuke state service must return the record's version as ETag"
            )
        return etag


__all__ = ["MAX_RESPONSE_BYTES", "Reply", "Wire"]
