"""What each state API request means: routing, namespaces, auth, runs and locks.

This module owns the meaning of a request, independent of HTTP plumbing: it
turns a :class:`~zuke._serve.answers.Request` (method, target, headers, body
already read) into a :class:`~zuke._serve.answers.Response`. The ASGI layer
(:mod:`zuke._serve.asgi`) reads the request, applies the limits and writes the
answer; the build catalog's handlers live in :mod:`zuke._serve.builds`.

Namespacing: everything before the first ``runs``, ``locks`` or ``builds``
path segment is a namespace, and each namespace has its own runs, locks and
builds. So ``http://host:8780/ns/team-a`` and ``http://host:8780`` are two
independent stores on one service, as the state API's "all paths hang off the
base URL" promises. Namespace segments use the id alphabet and cannot be a
collection name themselves, which keeps the split unambiguous.

The service validates what it stores (a PUT body must parse as a run record
whose id matches the path, a PATCH body as a run delta) but stores the record
as sent, so fields it does not know round-trip unchanged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from zuke._errors import CorruptRecordError
from zuke._serve import builds
from zuke._serve.answers import (
    COMMON_HEADERS,
    JSON_TYPE,
    Refusal,
    Request,
    Response,
    allowed,
    json_body,
    json_response,
    limit,
    object_body,
    refuse,
    safe_id,
    since_ms,
    token,
    ttl,
)
from zuke._serve.backend import ServeDb
from zuke._serve.jsontext import dumps, encode
from zuke.state._http_wire import PROTOCOL_HEADER, PROTOCOL_VERSION, WRITE_ID_HEADER
from zuke.state._ids import check_id
from zuke.state._protocol import LockHeld
from zuke.state.records import RUN_STATUSES
from zuke.state.wire import holder_to_json, parse_delta, parse_holder, parse_record

_MAX_NAMESPACE_DEPTH = 8
_ITEM_NAMES = {"runs": "run id", "locks": "lock key", "builds": "build id"}

_Handler = Callable[[str, str, Request], Response]


@dataclass(frozen=True)
class _Route:
    ns: str
    collection: str  # "runs", "locks" or "builds"
    item: str | None  # the run id, lock key or build id; None for the collection


def _route(path: str) -> _Route:
    # Split before decoding, so an encoded "/" stays inside its segment (and is refused).
    segments = [unquote(s) for s in path.split("/") if s]
    i = next((n for n, segment in enumerate(segments) if segment in _ITEM_NAMES), -1)
    if i < 0:
        raise refuse(404, "not found: state API paths end in /runs, /locks or /builds[/:id]")
    ns_parts, rest = segments[:i], segments[i + 1 :]
    if len(ns_parts) > _MAX_NAMESPACE_DEPTH:
        raise refuse(404, "not found: namespace too deep")
    for part in ns_parts:
        safe_id(part, "namespace segment")
    if len(rest) > 1:
        raise refuse(404, "not found")
    item = safe_id(rest[0], _ITEM_NAMES[segments[i]]) if rest else None
    return _Route(ns="/".join(ns_parts), collection=segments[i], item=item)


def _write_id(request: Request) -> str | None:
    """The request's idempotency key (``x-zuke-write-id``, our extension), if it sent one."""
    given = request.headers.get(WRITE_ID_HEADER)
    if given is None:
        return None
    try:
        return check_id(given.strip(), WRITE_ID_HEADER)
    except ValueError as exc:
        raise refuse(400, str(exc).removeprefix("state: ")) from None


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
    """Answers state API requests from a :class:`~zuke._serve.backend.ServeDb`."""

    def __init__(self, db: ServeDb, *, token: str | None) -> None:
        self._db = db
        self._token = token
        self._items: dict[str, dict[str, _Handler]] = {
            "runs": {
                "GET": self._get_run,
                "PUT": self._put_run,
                "PATCH": self._patch_run,
                "DELETE": self._delete_run,
            },
            "locks": {
                "POST": self._acquire_lock,
                "PUT": self._renew_lock,
                "DELETE": self._release_lock,
            },
            "builds": {
                "GET": lambda ns, item, r: builds.get(db.builds, ns, item),
                "PUT": lambda ns, item, r: builds.put(db.builds, ns, item, r),
                "DELETE": lambda ns, item, r: builds.delete(db.builds, ns, item),
            },
        }

    def authorized(self, headers: Mapping[str, str]) -> bool:
        return self._token is None or token_matches(self._token, headers.get("authorization"))

    def handle_promptly(self, request: Request) -> Response:
        """:meth:`handle`, or :class:`~zuke._serve.sqlite.WouldWait` if a write would wait.

        For the event loop: it answers what needs no waiting itself (see
        :mod:`zuke._serve.sqlite`) and hands the rest to a worker.
        """
        with self._db.promptly():
            return self.handle(request)

    def handle(self, request: Request) -> Response:
        """The answer to ``request`` (auth already checked by the caller)."""
        try:
            response = self._dispatch(request)
        except Refusal as refusal:
            response = refusal.response
        return Response(response.status, response.body, response.headers + COMMON_HEADERS)

    def _dispatch(self, request: Request) -> Response:
        spoken = request.headers.get(PROTOCOL_HEADER)
        if spoken is not None and spoken.strip() != PROTOCOL_VERSION:
            raise refuse(
                400, f"state-api protocol mismatch: this service speaks {PROTOCOL_VERSION}"
            )
        parts = urlsplit(request.target)
        route = _route(parts.path)
        if route.item is None:
            if request.method != "GET":
                raise refuse(405, "method not allowed", allowed("GET"))
            params = {k: v[0] for k, v in parse_qs(parts.query).items() if v and v[0]}
            if route.collection == "runs":
                return self._list_runs(route.ns, params)
            if route.collection == "locks":
                return self._list_locks(route.ns, params)
            return builds.listing(self._db.builds, route.ns, params)
        handlers = self._items[route.collection]
        handler = handlers.get(request.method)
        if handler is None:
            raise refuse(405, "method not allowed", allowed(*handlers))
        return handler(route.ns, route.item, request)

    # ------------------------------------------------------------ runs

    def _get_run(self, ns: str, run_id: str, request: Request) -> Response:
        stored = self._db.get_run(ns, run_id)
        if stored is None:
            raise refuse(404, "no such run")
        return Response(200, stored.text.encode(), (JSON_TYPE, ("ETag", stored.etag)))

    def _put_run(self, ns: str, run_id: str, request: Request) -> Response:
        raw = json_body(request)
        try:
            record = parse_record(raw, where="body")
        except CorruptRecordError as exc:
            raise refuse(400, f"body is not a run record: {exc}") from None
        if record.id != run_id:
            raise refuse(400, f"body is the record of run {record.id!r}, not {run_id!r}")
        text = dumps(raw)
        if_none_match = request.headers.get("if-none-match")
        if_match = request.headers.get("if-match")
        if if_none_match is not None:
            if if_none_match.strip() != "*":
                raise refuse(400, "If-None-Match must be * (create)")
            etag = self._db.create_run(ns, record, text, write_id=_write_id(request))
            if etag is None:
                raise refuse(412, "run exists")
            return json_response(201, {"version": etag}, ("ETag", etag))
        if if_match is None:
            raise refuse(428, "send If-None-Match: * to create or If-Match: <etag> to update")
        outcome, etag = self._db.update_run(
            ns, record, text, if_match=if_match.strip(), write_id=_write_id(request)
        )
        if outcome != "written":
            raise refuse(412, f"precondition failed: run {outcome}")
        return json_response(200, {"version": etag}, ("ETag", etag))

    def _patch_run(self, ns: str, run_id: str, request: Request) -> Response:
        if_match = request.headers.get("if-match")
        if if_match is None:
            raise refuse(428, "send If-Match: <etag>")
        raw = json_body(request)
        try:
            delta = parse_delta(raw, where="body")
        except CorruptRecordError as exc:
            raise refuse(400, f"body is not a run delta: {exc}") from None
        outcome, etag = self._db.patch_run(
            ns, run_id, delta, if_match=if_match.strip(), write_id=_write_id(request)
        )
        if outcome == "missing":
            raise refuse(404, "no such run")
        if outcome == "mismatch":
            raise refuse(412, "precondition failed: version mismatch")
        return json_response(200, {"version": etag}, ("ETag", etag))

    def _delete_run(self, ns: str, run_id: str, request: Request) -> Response:
        if not self._db.delete_run(ns, run_id):
            raise refuse(404, "no such run")
        return json_response(200, {"deleted": run_id})

    def _list_runs(self, ns: str, params: Mapping[str, str]) -> Response:
        status = params.get("status")
        if status is not None and status not in RUN_STATUSES:
            raise refuse(400, f"status must be one of {', '.join(RUN_STATUSES)}")
        rows = self._db.list_runs(
            ns,
            status=status,
            target=params.get("target"),
            build=params.get("build"),
            since_ms=since_ms(params),
            limit=limit(params),
        )
        keys = ("id", "build", "rootTarget", "status", "actor", "createdAt", "updatedAt")
        return json_response(200, [dict(zip(keys, row, strict=True)) for row in rows])

    # ------------------------------------------------------------ locks

    def _acquire_lock(self, ns: str, key: str, request: Request) -> Response:
        body = object_body(request)
        try:
            holder = parse_holder(body.get("holder"))
        except CorruptRecordError:
            raise refuse(400, "holder must be {actor, runId, since, runUrl?} of strings") from None
        decision = self._db.locks.acquire(ns, key, holder, ttl(body), write_id=_write_id(request))
        if isinstance(decision, LockHeld):
            return Response(409, encode(holder_to_json(decision.holder)), (JSON_TYPE,))
        return json_response(201, {"token": decision.token, "fence": decision.fence})

    def _renew_lock(self, ns: str, key: str, request: Request) -> Response:
        body = object_body(request)
        renewed = self._db.locks.renew(ns, key, token(body), ttl(body))
        if renewed is None:
            raise refuse(404, "no such lock")
        if not renewed:
            raise refuse(409, "the lock is held under another token")
        return json_response(200, {"renewed": True})

    def _release_lock(self, ns: str, key: str, request: Request) -> Response:
        if parse_qs(urlsplit(request.target).query).get("force") == ["1"]:
            return self._break_lock(ns, key)
        # A token that does not hold the key is a no-op answered 404: the
        # TypeScript client treats 2xx and 404 as done (and errors on 409).
        if not self._db.locks.release(ns, key, token(object_body(request))):
            raise refuse(404, "no claim with that token")
        return json_response(200, {"released": True})

    def _break_lock(self, ns: str, key: str) -> Response:
        # ``DELETE /locks/:key?force=1`` (our extension): remove the claim without its
        # token. Always 200 with ``broken``, so a server without it (400/404) is told apart.
        holder = self._db.locks.break_claim(ns, key)
        if holder is None:
            return json_response(200, {"broken": False})
        return json_response(200, {"broken": True, "holder": holder_to_json(holder)})

    def _list_locks(self, ns: str, params: Mapping[str, str]) -> Response:
        run_id = params.get("runId")
        if run_id is not None:
            safe_id(run_id, "run id")
        claims = self._db.locks.list(ns, run_id=run_id)
        return json_response(
            200,
            [
                {"key": c.key, "holder": holder_to_json(c.holder), "expiresAt": c.expires_at,
                 "fence": c.fence}
                for c in claims
            ],
        )  # fmt: skip


__all__ = ["StateApp", "token_matches"]
