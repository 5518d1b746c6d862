"""The HTTP state store: a client of the published Zuke state HTTP API.

:class:`HttpStateStore` speaks the same wire contract as the TypeScript Zuke
(runs with ETag compare-and-swap, ``/locks`` acquire/renew/release, see
``docs/state-api.md``), so one state service serves both implementations.

The service is untrusted input: every response is checked (status, the
``ETag`` a write must return, the JSON shape via :mod:`zuke.state.records`)
and anything unexpected becomes a :class:`~zuke.StoreUnavailableError` that
names the call. Messages say what failed and what to check, and never
contain the token or the credentials of a ``user:pass@`` URL.

Linear persistence rides our ``PATCH /runs/:id`` extension (the body is a
:class:`~zuke.state.records.RunDelta`). A server without it — the TypeScript
one — answers 404/405/501 without advertising the ``journal`` feature; the
store remembers that and appends by GET + apply + PUT ``If-Match`` instead.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import httpx

from zuke._errors import CorruptRecordError, StateError, StoreUnavailableError
from zuke.state._http_wire import (
    FEATURES_HEADER,
    JOURNAL_FEATURE,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
    STATE_URL_ENV,
    InsecureStateUrlError,
    check_url_is_secure,
    redact_url,
)
from zuke.state._ids import check_id
from zuke.state._protocol import (
    Conflict,
    LockAcquired,
    LockHeld,
    LockHolder,
    RunQuery,
    StoredRun,
    Written,
)
from zuke.state.records import (
    RunDelta,
    RunRecord,
    RunSummary,
    apply_delta,
    delta_to_json,
    parse_record,
    parse_summary,
    record_to_json,
)

# A run record is kilobytes; anything this large is a misbehaving service.
_MAX_RESPONSE_BYTES = 32 * 1024 * 1024
# Statuses with which a server that lacks PATCH turns it down.
_NO_PATCH_STATUSES = frozenset({404, 405, 501})
_NO_FILTER = RunQuery()


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
class _Reply:
    """A fully read, already closed response."""

    call: str
    status: int
    headers: httpx.Headers
    body: bytes


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
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        auth = httpx.BasicAuth(user, password)
    base = urlunsplit((parts.scheme.lower(), netloc, parts.path.rstrip("/"), "", ""))
    return base, auth


class HttpStateStore:
    """A :class:`~zuke.state.JournalingStateStore` backed by a Zuke state service."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self._shown_url = redact_url(url).rstrip("/")
        self._base, basic = _split_base(url)
        self._has_token = bool(token)
        # The token lives only inside the auth object; it is never formatted.
        auth: httpx.Auth | None = _BearerAuth(token) if token else basic
        self._client = httpx.Client(
            auth=auth,
            transport=transport,
            timeout=timeout_s,
            headers={PROTOCOL_HEADER: PROTOCOL_VERSION, "Accept": "application/json"},
            follow_redirects=False,
        )
        self._timeout_s = timeout_s
        # None: not known yet; learned from the first PATCH answer.
        self._patch_supported: bool | None = None

    def __repr__(self) -> str:
        token = "<redacted>" if self._has_token else None
        return f"HttpStateStore(url={self._shown_url!r}, token={token!r})"

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpStateStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ------------------------------------------------------------ runs

    def get_run(self, run_id: str) -> StoredRun | None:
        path = _run_path(run_id)
        reply = self._send("GET", path)
        if reply.status == 404:
            return None
        if reply.status != 200:
            raise self._unexpected(reply)
        version = self._etag(reply)
        record = self._record(reply)
        if record.id != run_id:
            raise StoreUnavailableError(
                f"state: {reply.call} returned the record of run {record.id!r} instead"
            )
        return StoredRun(record=record, version=version)

    def create_run(self, record: RunRecord) -> Written | Conflict:
        reply = self._send(
            "PUT",
            _run_path(record.id),
            body=record_to_json(record),
            headers={"If-None-Match": "*"},
        )
        return self._write_result(reply)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        reply = self._send(
            "PUT",
            _run_path(record.id),
            body=record_to_json(record),
            headers={"If-Match": expected_version},
        )
        return self._write_result(reply)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        path = _run_path(run_id)
        if self._patch_supported is not False:
            reply = self._send(
                "PATCH", path, body=delta_to_json(delta), headers={"If-Match": expected_version}
            )
            advertised = _has_journal(reply)
            if reply.status in _NO_PATCH_STATUSES and not advertised:
                # The TypeScript service (or a proxy) has no PATCH: remember, fall back.
                self._patch_supported = False
            elif reply.status == 404:
                # A journal server saying the run is absent: it is not at that version.
                return Conflict()
            else:
                self._patch_supported = True
                return self._write_result(reply)
        current = self.get_run(run_id)
        if current is None or current.version != expected_version:
            return Conflict()
        return self.put_run(apply_delta(current.record, delta), expected_version=expected_version)

    def delete_run(self, run_id: str) -> None:
        reply = self._send("DELETE", _run_path(run_id))
        if reply.status != 404 and not 200 <= reply.status < 300:
            raise self._unexpected(reply)

    def list_runs(self, query: RunQuery = _NO_FILTER) -> list[RunSummary]:
        params: dict[str, str] = {}
        if query.status is not None:
            params["status"] = query.status
        if query.target is not None:
            params["target"] = query.target
        if query.since is not None:
            params["since"] = query.since
        if query.limit is not None:
            params["limit"] = str(query.limit)
        reply = self._send("GET", "/runs", params=params)
        if reply.status != 200:
            raise self._unexpected(reply)
        raw = self._json(reply, "a list of run summaries")
        if not isinstance(raw, list):
            raise self._bad_body(reply, "a list of run summaries")
        try:
            return [
                parse_summary(item, where=f"{reply.call} item {i}") for i, item in enumerate(raw)
            ]
        except CorruptRecordError as exc:
            raise self._bad_body(reply, "a list of run summaries", detail=str(exc)) from None

    # ------------------------------------------------------------ locks

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        body = {"holder": _holder_to_json(holder), "ttlMs": ttl_ms}
        reply = self._send("POST", _lock_path(key), body=body)
        if reply.status == 409:
            return LockHeld(holder=self._holder(reply))
        if not 200 <= reply.status < 300:
            raise self._unexpected(reply)
        raw = self._json(reply, "a lock grant")
        token = raw.get("token") if isinstance(raw, dict) else None
        fence = raw.get("fence", 0) if isinstance(raw, dict) else None
        # A server without fencing (the TypeScript one) sends no fence: report 0.
        if fence is None:
            fence = 0
        if not isinstance(token, str) or not token or type(fence) is not int or fence < 0:
            raise self._bad_body(reply, "a lock grant {token, fence}")
        return LockAcquired(token=token, fence=fence)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        reply = self._send("PUT", _lock_path(key), body={"token": token, "ttlMs": ttl_ms})
        if reply.status in (404, 409):
            return False
        if not 200 <= reply.status < 300:
            raise self._unexpected(reply)
        return True

    def release_lock(self, key: str, token: str) -> None:
        reply = self._send("DELETE", _lock_path(key), body={"token": token})
        if reply.status not in (404, 409) and not 200 <= reply.status < 300:
            raise self._unexpected(reply)

    # ------------------------------------------------------------ the wire

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
    ) -> _Reply:
        """One request, its body read (capped) and the response closed on every path."""
        call = f"{method} {path}"
        content = None if body is None else json.dumps(body).encode()
        send_headers = dict(headers or {})
        if content is not None:
            send_headers["Content-Type"] = "application/json"
        request = self._client.build_request(
            method, self._base + path, content=content, headers=send_headers, params=params
        )
        try:
            response = self._client.send(request, stream=True)
            try:
                chunks: list[bytes] = []
                size = 0
                for chunk in response.iter_bytes():
                    size += len(chunk)
                    if size > _MAX_RESPONSE_BYTES:
                        raise StoreUnavailableError(
                            f"state: {call} returned a body larger than "
                            f"{_MAX_RESPONSE_BYTES} bytes; is {STATE_URL_ENV} a Zuke state service?"
                        )
                    chunks.append(chunk)
            finally:
                response.close()
        except httpx.TimeoutException:
            raise self._unavailable(call, f"timed out after {self._timeout_s:g}s") from None
        except httpx.HTTPError as exc:
            raise self._unavailable(call, f"could not connect ({type(exc).__name__})") from None
        reply = _Reply(call, response.status_code, response.headers, b"".join(chunks))
        self._check_common(reply)
        return reply

    def _unavailable(self, call: str, what: str) -> StoreUnavailableError:
        return StoreUnavailableError(
            f"state: {call} {what}. Is the state service at {self._shown_url} up? "
            f"Check {STATE_URL_ENV}."
        )

    def _check_common(self, reply: _Reply) -> None:
        """Failures every call shares: protocol mismatch, refused token, server errors."""
        echoed = reply.headers.get(PROTOCOL_HEADER)
        if echoed is not None and echoed.strip() != PROTOCOL_VERSION:
            raise StoreUnavailableError(
                f"state: {reply.call}: state-api protocol mismatch: the service at "
                f"{self._shown_url} speaks protocol {echoed[:20]!r}, this client speaks "
                f"{PROTOCOL_VERSION!r}. Upgrade the older side."
            )
        if reply.status in (401, 403):
            # The server's body is not shown: it might echo what we sent.
            advice = (
                "the state service refused the token; check ZUKE_STATE_TOKEN"
                if self._has_token
                else "the state service requires a token; set ZUKE_STATE_TOKEN"
            )
            raise StoreUnavailableError(f"state: {reply.call} got HTTP {reply.status}: {advice}.")
        if reply.status >= 500:
            raise self._unavailable(reply.call, f"failed with HTTP {reply.status}")

    def _unexpected(self, reply: _Reply) -> StoreUnavailableError:
        detail = ""
        try:
            raw = json.loads(reply.body)
        except ValueError:
            raw = None
        if isinstance(raw, dict) and isinstance(raw.get("error"), str):
            detail = f" ({raw['error'][:200]})"
        return StoreUnavailableError(
            f"state: {reply.call} got unexpected HTTP {reply.status} from the state service at "
            f"{self._shown_url}{detail}"
        )

    def _bad_body(
        self, reply: _Reply, what: str, *, detail: str | None = None
    ) -> StoreUnavailableError:
        suffix = f" ({detail})" if detail else ""
        return StoreUnavailableError(
            f"state: {reply.call} returned a body that is not {what}{suffix}"
        )

    def _json(self, reply: _Reply, what: str) -> Any:
        try:
            return json.loads(reply.body)
        except (ValueError, RecursionError):
            raise self._bad_body(reply, what) from None

    def _etag(self, reply: _Reply) -> str:
        etag: str | None = reply.headers.get("etag")
        if not etag:
            raise StoreUnavailableError(
                f"state: {reply.call} answered HTTP {reply.status} without an ETag header; "
                "a Zuke state service must return the record's version as ETag"
            )
        return etag

    def _record(self, reply: _Reply) -> RunRecord:
        raw = self._json(reply, "a run record")
        try:
            return parse_record(raw, where=reply.call)
        except CorruptRecordError as exc:
            raise self._bad_body(reply, "a run record", detail=str(exc)) from None

    def _holder(self, reply: _Reply) -> LockHolder:
        raw = self._json(reply, "a lock holder")
        if isinstance(raw, dict):
            actor, run_id, since = raw.get("actor"), raw.get("runId"), raw.get("since")
            run_url = raw.get("runUrl")
            if (
                isinstance(actor, str)
                and isinstance(run_id, str)
                and isinstance(since, str)
                and (run_url is None or isinstance(run_url, str))
            ):
                return LockHolder(actor=actor, run_id=run_id, since=since, run_url=run_url)
        raise self._bad_body(reply, "a lock holder {actor, runId, since, runUrl?}")

    def _write_result(self, reply: _Reply) -> Written | Conflict:
        if reply.status == 412:
            return Conflict()
        if not 200 <= reply.status < 300:
            raise self._unexpected(reply)
        return Written(version=self._etag(reply))


def _run_path(run_id: str) -> str:
    return "/runs/" + quote(check_id(run_id, "run id"), safe="")


def _lock_path(key: str) -> str:
    return "/locks/" + quote(check_id(key, "lock key"), safe="")


def _has_journal(reply: _Reply) -> bool:
    features = reply.headers.get(FEATURES_HEADER, "")
    return JOURNAL_FEATURE in (f.strip() for f in features.split(","))


def _holder_to_json(holder: LockHolder) -> dict[str, str]:
    out = {"actor": holder.actor, "runId": holder.run_id, "since": holder.since}
    if holder.run_url is not None:
        out["runUrl"] = holder.run_url
    return out


__all__ = [
    "HttpStateStore",
    "InsecureStateUrlError",
    "check_url_is_secure",
    "redact_url",
]
