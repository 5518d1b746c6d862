"""The HTTP state store's transport: one request in, one checked, closed reply out.

This module owns the mechanics every call of
:class:`~zuke.state.http.HttpStateStore` shares: the connection (plain
``http://`` on :mod:`zuke.state._http_conn`'s pooled sockets; https, a proxy
from the environment or an injected transport through an ``httpx.Client``),
the protocol header, bearer auth, reading a response body with a size cap and
closing it on every path, and the failures that mean the same thing whatever
the call (connection errors and timeouts, 5xx, a refused token, a protocol
mismatch). :mod:`zuke.state.http` decides what each status means for its call.

httpx is imported only when a store needs it, so a run against a plain-http
service never loads it (about 80 ms of start-up).

Secrets: the ``Authorization`` value lives only inside :class:`_Credential`,
which never formats it; credentials in a ``user:pass@`` URL are moved into
basic auth and redacted from every message.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode, urlsplit, urlunsplit

from zuke._errors import StateError, StoreUnavailableError, ZukeError
from zuke.state._http_conn import Answer, DirectConnections, TooLargeError, direct_ok
from zuke.state._http_wire import (
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    STATE_URL_ENV,
    WRITE_ID_HEADER,
    redact_url,
)
from zuke.state._unsure import UnsureWriteError

if TYPE_CHECKING:
    import httpx

# A run record is kilobytes; anything this large is a misbehaving service.
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: pauses before a keyed write that got no answer is sent again (then it is unsure)
RESEND_PAUSES_S: tuple[float, ...] = (0.2, 0.5)


class _Credential:
    """The ``Authorization`` header's value; never formatted."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "_Credential(<redacted>)"


@dataclass(frozen=True)
class Reply:
    """A fully read, already closed response; ``call`` is e.g. ``GET /runs/abc``.

    ``headers`` has lower-case names (a repeated header's values joined with ``, ``).
    """

    call: str
    status: int
    headers: Mapping[str, str]
    body: bytes

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


class _Unanswered(StoreUnavailableError):
    """The request got no answer that says what became of it (no connection, a timeout, a
    5xx): a keyed write is sent again; anything else is this error, as it always was."""

    def __init__(self, error: StoreUnavailableError) -> None:
        super().__init__(str(error))


class _Unreachable(ZukeError):
    """The request got no answer; ``what`` says why, for the message."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def _split_base(url: str) -> tuple[str, _Credential | None]:
    """The base URL without userinfo or trailing slashes, and basic auth from the userinfo."""
    try:
        parts = urlsplit(url)
        host_ok = bool(parts.hostname)
        _ = parts.port  # raises ValueError for a port that is not a number
    except ValueError:
        host_ok = False
    if not host_ok or parts.scheme.lower() not in ("http", "https"):
        raise StateError(f"state: {redact_url(url)} is not an http(s) URL with a host")
    if parts.query or parts.fragment:
        raise StateError(f"state: {redact_url(url)} must not carry a query or fragment")
    basic: _Credential | None = None
    netloc = parts.netloc
    if "@" in netloc:
        # Moved out of the URL so that no URL we format or log carries them.
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        pair = base64.b64encode(f"{user}:{password}".encode()).decode()
        basic = _Credential(f"Basic {pair}")
    base = urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))
    return base, basic


class _Direct:
    """Requests on :class:`~zuke.state._http_conn.DirectConnections` (plain http, no proxy)."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        assert parts.hostname is not None
        # As httpx does: characters a path may not carry are percent-encoded, escapes kept.
        self._prefix = quote(parts.path, safe="/%:@!$&'()*+,;=")
        self._connections = DirectConnections(parts.hostname, parts.port or 80)

    def close(self) -> None:
        self._connections.close()

    def exchange(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None,
        timeout_s: float,
    ) -> Answer:  # fmt: skip
        try:
            return self._connections.exchange(
                method, self._prefix + target, headers, body,
                timeout_s=timeout_s, max_body=MAX_RESPONSE_BYTES,
            )  # fmt: skip
        except TimeoutError:
            raise _Unreachable(f"timed out after {timeout_s:g}s") from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            # The exception's text is not shown: it may quote what was sent or received.
            raise _Unreachable(f"could not connect ({type(exc).__name__})") from None


class _Httpx:
    """Requests through an ``httpx.Client``: https, a proxy, or an injected transport."""

    def __init__(self, base: str, transport: httpx.BaseTransport | None, timeout_s: float) -> None:
        import httpx

        self._httpx = httpx
        self._base = base
        self._client = httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=False)

    def close(self) -> None:
        self._client.close()

    def exchange(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None,
        timeout_s: float,
    ) -> Answer:  # fmt: skip
        httpx = self._httpx
        request = self._client.build_request(
            method, self._base + target, content=body, headers=headers, timeout=timeout_s
        )
        try:
            response = self._client.send(request, stream=True)
            try:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > MAX_RESPONSE_BYTES:
                        raise TooLargeError
                    chunks.append(chunk)
            finally:
                response.close()
        except httpx.TimeoutException:
            raise _Unreachable(f"timed out after {timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            # The exception's text is not shown: it is the transport's, not ours to vet.
            raise _Unreachable(f"could not connect ({type(exc).__name__})") from None
        merged = {name.lower(): value for name, value in response.headers.items()}
        return Answer(response.status_code, merged, b"".join(chunks))


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
        base, basic = _split_base(url)
        self.has_token = bool(token)
        self._timeout_s = timeout_s
        # The bearer token wins over credentials in the URL.
        self._auth = _Credential(f"Bearer {token}") if token else basic
        self._headers = {PROTOCOL_HEADER: PROTOCOL_VERSION, "Accept": "application/json"}
        self._conn: _Direct | _Httpx
        if transport is None and direct_ok(urlsplit(base).scheme):
            self._conn = _Direct(base)
        else:
            self._conn = _Httpx(base, transport, timeout_s)

    @property
    def timeout_s(self) -> float:
        """The client's request timeout."""
        return self._timeout_s

    def close(self) -> None:
        self._conn.close()

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
        write_id: str | None = None,
    ) -> Reply:
        """One request; its body read (capped) and the response closed on every path.

        ``handles``: statuses the caller interprets itself, exempt from the
        shared server-error check (PATCH's 501 means "no PATCH here").
        ``timeout_s`` overrides the client's timeout for this request.
        ``write_id``: the write's idempotency key (``x-zuke-write-id``). A keyed request
        that gets no answer (no connection, a timeout, a 5xx) is sent again, the same, after
        each of :data:`RESEND_PAUSES_S` — a server that kept the key answers it as it landed —
        and if none is answered, :class:`~._unsure.UnsureWriteError` says it may have landed.
        """
        if write_id is None:
            return self._send_once(method, path, body, headers, params, handles, timeout_s)
        keyed = {**(headers or {}), WRITE_ID_HEADER: write_id}
        for pause in (*RESEND_PAUSES_S, None):
            try:
                return self._send_once(method, path, body, keyed, params, handles, timeout_s)
            except _Unanswered as exc:
                if pause is None:
                    raise UnsureWriteError(str(exc)) from None
                time.sleep(pause)
        raise AssertionError("unreachable")

    def _send_once(
        self,
        method: str,
        path: str,
        body: Any,
        headers: Mapping[str, str] | None,
        params: Mapping[str, str] | None,
        handles: frozenset[int],
        timeout_s: float | None,
    ) -> Reply:
        timeout = self._timeout_s if timeout_s is None else timeout_s
        call = f"{method} {path}"
        content = None if body is None else json.dumps(body).encode()
        send_headers = dict(self._headers)
        if headers:
            send_headers.update(headers)
        if content is not None:
            send_headers["Content-Type"] = "application/json"
        if self._auth is not None:
            send_headers["Authorization"] = self._auth.value
        target = path + ("?" + urlencode(params) if params else "")
        try:
            answer = self._conn.exchange(method, target, send_headers, content, timeout)
        except _Unreachable as exc:
            raise _Unanswered(self.unavailable(call, exc.what)) from None
        except TooLargeError:
            raise StoreUnavailableError(
                f"state: {call} returned a body larger than {MAX_RESPONSE_BYTES} "
                f"bytes; is {STATE_URL_ENV} a Zuke state service?"
            ) from None
        reply = Reply(call, answer.status, answer.headers, answer.body)
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
            raise _Unanswered(self.unavailable(reply.call, f"failed with HTTP {reply.status}"))

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
