"""Request handling for ``zuke serve``: routing, auth, validation, the state API's answers.

This module owns what each request means, independent of sockets: it turns
a :class:`Request` (method, path, headers, body already read) into a
:class:`Response`. The HTTP plumbing in :mod:`zuke._serve.server` reads the
request, applies the body-size limit and writes the response.

Namespacing: everything before the first ``runs`` or ``locks`` path segment
is a namespace, and each namespace has its own runs and locks. So
``http://host:8780/ns/team-a`` and ``http://host:8780`` are two independent
stores on one service, as the state API's "all paths hang off the base URL"
promises. Namespace segments use the id alphabet and cannot be ``runs`` or
``locks`` themselves, which keeps the split unambiguous.

The service validates what it stores (a PUT body must parse as a run
record whose id matches the path, a PATCH body as a run delta) but stores the
record as sent, so fields it does not know round-trip unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from zuke._errors import CorruptRecordError, UnsafeIdError
from zuke._serve.db import Granted, StateDb
from zuke.state._http_wire import (
    FEATURES_HEADER,
    JOURNAL_FEATURE,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
)
from zuke.state._ids import check_id
from zuke.state.records import RUN_STATUSES
from zuke.state.wire import holder_to_json, parse_delta, parse_holder, parse_record

_MAX_NAMESPACE_DEPTH = 8
_COLLECTIONS = ("runs", "locks")
# A year: long past any sane lease, and far from SQLite's 64-bit integer limit.
_MAX_TTL_MS = 366 * 24 * 3600 * 1000


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # the request target: path and query, as sent
    headers: Mapping[str, str]  # keys lower-case
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = field(default=())


def json_response(status: int, payload: Any, *headers: tuple[str, str]) -> Response:
    body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()
    return Response(status, body, (("Content-Type", "application/json"), *headers))


def error_response(status: int, message: str, *headers: tuple[str, str]) -> Response:
    return json_response(status, {"error": message}, *headers)


# Headers on every answer: the protocol echo and our feature advertisement.
COMMON_HEADERS: tuple[tuple[str, str], ...] = (
    (PROTOCOL_HEADER, PROTOCOL_VERSION),
    (FEATURES_HEADER, JOURNAL_FEATURE),
    ("Cache-Control", "no-store"),
)

UNAUTHORIZED = error_response(401, "unauthorized", ("WWW-Authenticate", "Bearer"))


class _Refusal(Exception):
    """Internal: stop handling and answer with ``response``."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _refuse(status: int, message: str, *headers: tuple[str, str]) -> _Refusal:
    return _Refusal(error_response(status, message, *headers))


_Handler = Callable[[str, str, Request], Response]


@dataclass(frozen=True)
class _Route:
    ns: str
    collection: str  # "runs" or "locks"
    item: str | None  # the run id or lock key; None for the collection


def _route(path: str) -> _Route:
    # Split before decoding, so an encoded "/" stays inside its segment (and is refused).
    segments = [unquote(s) for s in path.split("/") if s]
    i = next((n for n, segment in enumerate(segments) if segment in _COLLECTIONS), -1)
    if i < 0:
        raise _refuse(404, "not found: state API paths end in /runs or /runs|locks/:id")
    ns_parts, rest = segments[:i], segments[i + 1 :]
    if len(ns_parts) > _MAX_NAMESPACE_DEPTH:
        raise _refuse(404, "not found: namespace too deep")
    for part in ns_parts:
        _safe(part, "namespace segment")
    if len(rest) > 1:
        raise _refuse(404, "not found")
    item = None
    if rest:
        item = _safe(rest[0], "run id" if segments[i] == "runs" else "lock key")
    return _Route(ns="/".join(ns_parts), collection=segments[i], item=item)


def _safe(value: str, what: str) -> str:
    try:
        return check_id(value, what)
    except UnsafeIdError as exc:
        raise _refuse(400, str(exc)) from None


def _allowed(*methods: str) -> tuple[str, str]:
    return ("Allow", ", ".join(methods))


def token_matches(expected: str, authorization: str | None) -> bool:
    """Constant-time check of an ``Authorization: Bearer <token>`` header."""
    scheme, _, given = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    # Compare digests so neither the content nor the length of the token leaks.
    want = hashlib.sha256(expected.encode()).digest()
    got = hashlib.sha256(given.strip().encode()).digest()
    return hmac.compare_digest(want, got) and bool(given.strip())


class StateApp:
    """Answers state API requests from a :class:`StateDb`."""

    def __init__(self, db: StateDb, *, token: str | None) -> None:
        self._db = db
        self._token = token

    def authorized(self, headers: Mapping[str, str]) -> bool:
        return self._token is None or token_matches(self._token, headers.get("authorization"))

    def handle(self, request: Request) -> Response:
        """The answer to ``request`` (auth already checked by the caller)."""
        try:
            response = self._dispatch(request)
        except _Refusal as refusal:
            response = refusal.response
        return Response(response.status, response.body, response.headers + COMMON_HEADERS)

    def _dispatch(self, request: Request) -> Response:
        spoken = request.headers.get(PROTOCOL_HEADER)
        if spoken is not None and spoken.strip() != PROTOCOL_VERSION:
            raise _refuse(
                400, f"state-api protocol mismatch: this service speaks {PROTOCOL_VERSION}"
            )
        parts = urlsplit(request.target)
        route = _route(parts.path)
        method = request.method
        if route.collection == "runs" and route.item is None:
            if method != "GET":
                raise _refuse(405, "method not allowed", _allowed("GET"))
            return self._list_runs(route.ns, parts.query)
        if route.item is None:
            raise _refuse(404, "not found: name a lock key, /locks/:key")
        handlers: dict[str, _Handler]
        if route.collection == "runs":
            handlers = {
                "GET": self._get_run,
                "PUT": self._put_run,
                "PATCH": self._patch_run,
                "DELETE": self._delete_run,
            }
        else:
            handlers = {
                "POST": self._acquire_lock,
                "PUT": self._renew_lock,
                "DELETE": self._release_lock,
            }
        handler = handlers.get(method)
        if handler is None:
            raise _refuse(405, "method not allowed", _allowed(*handlers))
        return handler(route.ns, route.item, request)

    # ------------------------------------------------------------ runs

    def _get_run(self, ns: str, run_id: str, request: Request) -> Response:
        stored = self._db.get_run(ns, run_id)
        if stored is None:
            raise _refuse(404, "no such run")
        return Response(
            200,
            stored.text.encode(),
            (("Content-Type", "application/json"), ("ETag", stored.etag)),
        )

    def _put_run(self, ns: str, run_id: str, request: Request) -> Response:
        raw = _json_body(request)
        try:
            record = parse_record(raw, where="body")
        except CorruptRecordError as exc:
            raise _refuse(400, f"body is not a run record: {exc}") from None
        if record.id != run_id:
            raise _refuse(400, f"body is the record of run {record.id!r}, not {run_id!r}")
        text = json.dumps(raw, ensure_ascii=False, separators=(",", ":"))
        if_none_match = request.headers.get("if-none-match")
        if_match = request.headers.get("if-match")
        if if_none_match is not None:
            if if_none_match.strip() != "*":
                raise _refuse(400, "If-None-Match must be * (create)")
            etag = self._db.create_run(ns, record, text)
            if etag is None:
                raise _refuse(412, "run exists")
            return json_response(201, {"version": etag}, ("ETag", etag))
        if if_match is None:
            raise _refuse(428, "send If-None-Match: * to create or If-Match: <etag> to update")
        outcome, etag = self._db.update_run(ns, record, text, if_match=if_match.strip())
        if outcome != "written":
            raise _refuse(412, f"precondition failed: run {outcome}")
        return json_response(200, {"version": etag}, ("ETag", etag))

    def _patch_run(self, ns: str, run_id: str, request: Request) -> Response:
        if_match = request.headers.get("if-match")
        if if_match is None:
            raise _refuse(428, "send If-Match: <etag>")
        raw = _json_body(request)
        try:
            delta = parse_delta(raw, where="body")
        except CorruptRecordError as exc:
            raise _refuse(400, f"body is not a run delta: {exc}") from None
        outcome, etag = self._db.patch_run(ns, run_id, delta, if_match=if_match.strip())
        if outcome == "missing":
            raise _refuse(404, "no such run")
        if outcome == "mismatch":
            raise _refuse(412, "precondition failed: version mismatch")
        return json_response(200, {"version": etag}, ("ETag", etag))

    def _delete_run(self, ns: str, run_id: str, request: Request) -> Response:
        if not self._db.delete_run(ns, run_id):
            raise _refuse(404, "no such run")
        return json_response(200, {"deleted": run_id})

    def _list_runs(self, ns: str, query: str) -> Response:
        params = {k: v[0] for k, v in parse_qs(query).items() if v and v[0]}
        status = params.get("status")
        if status is not None and status not in RUN_STATUSES:
            raise _refuse(400, f"status must be one of {', '.join(RUN_STATUSES)}")
        limit = None
        if "limit" in params:
            if not params["limit"].isdigit():
                raise _refuse(400, "limit must be a non-negative integer")
            limit = int(params["limit"])
        rows = self._db.list_runs(
            ns, status=status, target=params.get("target"), since=params.get("since"), limit=limit
        )
        keys = ("id", "build", "rootTarget", "status", "actor", "createdAt", "updatedAt")
        return json_response(200, [dict(zip(keys, row, strict=True)) for row in rows])

    # ------------------------------------------------------------ locks

    def _acquire_lock(self, ns: str, key: str, request: Request) -> Response:
        body = _object_body(request)
        try:
            holder = parse_holder(body.get("holder"))
        except CorruptRecordError:
            raise _refuse(400, "holder must be {actor, runId, since, runUrl?} of strings") from None
        holder_json = json.dumps(holder_to_json(holder), ensure_ascii=False, separators=(",", ":"))
        result = self._db.acquire_lock(ns, key, holder_json, _ttl(body))
        if isinstance(result, Granted):
            return json_response(201, {"token": result.token, "fence": result.fence})
        return Response(409, result.holder_json.encode(), (("Content-Type", "application/json"),))

    def _renew_lock(self, ns: str, key: str, request: Request) -> Response:
        body = _object_body(request)
        outcome = self._db.renew_lock(ns, key, _token(body), _ttl(body))
        if outcome == "missing":
            raise _refuse(404, "no such lock")
        if outcome == "held":
            raise _refuse(409, "the lock is held under another token")
        return json_response(200, {"renewed": True})

    def _release_lock(self, ns: str, key: str, request: Request) -> Response:
        # A token that does not hold the key is a no-op answered 404: the
        # TypeScript client treats 2xx and 404 as done (and errors on 409).
        if not self._db.release_lock(ns, key, _token(_object_body(request))):
            raise _refuse(404, "no claim with that token")
        return json_response(200, {"released": True})


def _json_body(request: Request) -> Any:
    try:
        return json.loads(request.body)
    except (ValueError, RecursionError):
        raise _refuse(400, "body is not valid JSON") from None


def _object_body(request: Request) -> dict[str, Any]:
    raw = _json_body(request)
    if not isinstance(raw, dict):
        raise _refuse(400, "body must be a JSON object")
    return raw


def _token(body: Mapping[str, Any]) -> str:
    token = body.get("token")
    if not isinstance(token, str) or not token:
        raise _refuse(400, "token must be a non-empty string")
    return token


def _ttl(body: Mapping[str, Any]) -> int:
    ttl = body.get("ttlMs")
    # bool is an int in Python; JSON true is not a TTL.
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not math.isfinite(ttl):
        raise _refuse(400, "ttlMs must be a positive number of milliseconds")
    ms = math.ceil(ttl)
    if not 0 < ms <= _MAX_TTL_MS:
        raise _refuse(400, f"ttlMs must be between 1 and {_MAX_TTL_MS} milliseconds")
    return ms


__all__ = [
    "COMMON_HEADERS",
    "UNAUTHORIZED",
    "Request",
    "Response",
    "StateApp",
    "error_response",
    "json_response",
    "token_matches",
]
