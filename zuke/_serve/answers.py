"""The vocabulary of ``zuke serve``'s handlers: a request, an answer, a refusal, parsed inputs.

Handlers (:mod:`zuke._serve.app`, :mod:`zuke._serve.builds`) take a
:class:`Request` whose body is already read and return a :class:`Response`;
anything they refuse they ``raise refuse(status, reason)``, which becomes
``{"error": reason}``. The helpers here parse what several resources share:
JSON bodies (strictly, see :mod:`zuke._serve.jsontext`), ``since`` and
``limit`` query values, ids and TTLs (through the validators every store uses,
so the messages match).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zuke._errors import UnsafeIdError
from zuke._serve import jsontext
from zuke._serve.schema import created_ms
from zuke._text import has_lone_surrogate
from zuke.state._http_wire import (
    FEATURES_HEADER,
    JOURNAL_FEATURE,
    MAX_LIST_LIMIT,
    PROTOCOL_HEADER,
    PROTOCOL_VERSION,
)
from zuke.state._ids import LockTtlError, check_id, check_ttl


@dataclass(frozen=True)
class Request:
    method: str
    target: str  # the request target: path (not percent-decoded) and query, as sent
    headers: Mapping[str, str]  # keys lower-case
    body: bytes = b""


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = field(default=())


JSON_TYPE = ("Content-Type", "application/json")


def json_response(status: int, payload: Any, *headers: tuple[str, str]) -> Response:
    return Response(status, jsontext.encode(payload), (JSON_TYPE, *headers))


def error_response(status: int, message: str, *headers: tuple[str, str]) -> Response:
    return json_response(status, {"error": message}, *headers)


# Headers on every answer: the protocol echo and our feature advertisement.
COMMON_HEADERS: tuple[tuple[str, str], ...] = (
    (PROTOCOL_HEADER, PROTOCOL_VERSION),
    (FEATURES_HEADER, JOURNAL_FEATURE),
    ("Cache-Control", "no-store"),
)

UNAUTHORIZED = error_response(401, "unauthorized", ("WWW-Authenticate", "Bearer"))


class Refusal(Exception):
    """Internal: stop handling and answer with ``response``."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def refuse(status: int, message: str, *headers: tuple[str, str]) -> Refusal:
    return Refusal(error_response(status, message, *headers))


def allowed(*methods: str) -> tuple[str, str]:
    return ("Allow", ", ".join(methods))


def json_body(request: Request) -> Any:
    try:
        raw = jsontext.loads(request.body)
    except jsontext.NotJsonError as exc:
        raise refuse(400, str(exc)) from None
    if has_lone_surrogate(raw):
        raise refuse(400, "body holds a lone surrogate (a \\ud800-\\udfff escape without its pair)")
    return raw


def object_body(request: Request) -> dict[str, Any]:
    raw = json_body(request)
    if not isinstance(raw, dict):
        raise refuse(400, "body must be a JSON object")
    return raw


def safe_id(value: object, what: str) -> str:
    try:
        return check_id(value, what)
    except UnsafeIdError as exc:
        raise refuse(400, str(exc)) from None


def ttl(body: Mapping[str, Any]) -> int:
    value = body.get("ttlMs")
    if isinstance(value, float) and math.isfinite(value):
        value = math.ceil(value)  # a JavaScript client may compute a fraction: round up
    try:
        return check_ttl(value)
    except LockTtlError as exc:
        raise refuse(400, str(exc)) from None


def token(body: Mapping[str, Any]) -> str:
    value = body.get("token")
    if not isinstance(value, str) or not value:
        raise refuse(400, "token must be a non-empty string")
    return value


def since_ms(params: Mapping[str, str]) -> int | None:
    """The ``since`` parameter as epoch ms; 400 unless it is an ISO-8601 instant."""
    text = params.get("since")
    if text is None:
        return None
    ms = created_ms(text)
    if ms is None:
        raise refuse(400, "since must be an ISO-8601 instant, e.g. 2026-01-15T00:00:00Z")
    return ms


def limit(params: Mapping[str, str]) -> int | None:
    text = params.get("limit")
    if text is None:
        return None
    # ASCII digits only: str.isdigit() and int() also take other scripts' digits.
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(MAX_LIST_LIMIT))
    if not digits or int(text) > MAX_LIST_LIMIT:
        raise refuse(400, f"limit must be an integer from 0 to {MAX_LIST_LIMIT}")
    return int(text)


__all__ = [
    "COMMON_HEADERS",
    "UNAUTHORIZED",
    "Refusal",
    "Request",
    "Response",
    "allowed",
    "error_response",
    "json_body",
    "json_response",
    "limit",
    "object_body",
    "refuse",
    "safe_id",
    "since_ms",
    "token",
    "ttl",
]
