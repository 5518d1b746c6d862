"""The build catalog, ``/builds``: what its requests mean.

The TypeScript Zuke registers each build's descriptor here (its
``HttpBuildRegistry``), on the same service, base URL, auth and protocol
header as ``/runs``. A descriptor is JSON, stored and returned as sent, with
the fields the catalog indexes checked: ``id`` (equal to the path's), ``name``
(non-empty), ``actor``, and ``createdAt`` / ``updatedAt`` (ISO-8601 instants).
Everything else (``location``, ``surface``, …) is the client's business.

* ``GET /builds/:id`` — 200 with ``ETag``, or 404 (not registered).
* ``PUT /builds/:id`` — ``If-None-Match: *`` creates (201), ``If-Match: <etag>``
  updates (200), 412 on a version mismatch, 428 without either. The first
  registration's ``createdAt`` is kept (see :mod:`zuke._serve.db_builds`).
* ``DELETE /builds/:id`` — 200, or 404 (which a client treats as done).
* ``GET /builds?name=&since=`` — ``[{id, name, actor, createdAt, updatedAt}]``,
  newest first; ``name`` exact, ``since`` inclusive as a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zuke._serve.answers import (
    JSON_TYPE,
    Request,
    Response,
    json_body,
    json_response,
    refuse,
    since_ms,
)
from zuke._serve.backend import BuildBackend, Descriptor
from zuke._serve.schema import created_ms


def get(table: BuildBackend, ns: str, build_id: str) -> Response:
    stored = table.get(ns, build_id)
    if stored is None:
        raise refuse(404, "no such build")
    text, etag = stored
    return Response(200, text.encode(), (JSON_TYPE, ("ETag", etag)))


def put(table: BuildBackend, ns: str, build_id: str, request: Request) -> Response:
    build = _descriptor(json_body(request), build_id)
    if_none_match = request.headers.get("if-none-match")
    if_match = request.headers.get("if-match")
    if if_none_match is not None:
        if if_none_match.strip() != "*":
            raise refuse(400, "If-None-Match must be * (create)")
        outcome, etag = table.put(ns, build, if_match=None)
        if outcome != "written":
            raise refuse(412, "build exists")
        return json_response(201, {"version": etag}, ("ETag", etag))
    if if_match is None:
        raise refuse(428, "send If-None-Match: * to create or If-Match: <etag> to update")
    outcome, etag = table.put(ns, build, if_match=if_match.strip())
    if outcome != "written":
        raise refuse(412, f"precondition failed: build {outcome}")
    return json_response(200, {"version": etag}, ("ETag", etag))


def delete(table: BuildBackend, ns: str, build_id: str) -> Response:
    if not table.delete(ns, build_id):
        raise refuse(404, "no such build")
    return json_response(200, {"deleted": build_id})


def listing(table: BuildBackend, ns: str, params: Mapping[str, str]) -> Response:
    return json_response(200, table.list(ns, name=params.get("name"), since_ms=since_ms(params)))


def _descriptor(raw: Any, build_id: str) -> Descriptor:
    if not isinstance(raw, dict):
        raise refuse(400, "body must be a build descriptor (a JSON object)")
    if raw.get("id") != build_id:
        raise refuse(400, f"body is the descriptor of build {raw.get('id')!r}, not {build_id!r}")
    fields = {}
    for key in ("name", "actor", "createdAt", "updatedAt"):
        value = raw.get(key)
        if not isinstance(value, str) or (key == "name" and not value):
            raise refuse(400, f"build descriptor: {key} must be a {_WHAT[key]}")
        fields[key] = value
    created = created_ms(fields["createdAt"])
    if created is None or created_ms(fields["updatedAt"]) is None:
        raise refuse(400, "build descriptor: createdAt and updatedAt must be ISO-8601 instants")
    return Descriptor(
        id=build_id,
        raw=raw,
        name=fields["name"],
        actor=fields["actor"],
        created_at=fields["createdAt"],
        created_ms=created,
        updated_at=fields["updatedAt"],
    )


_WHAT = {
    "name": "non-empty string",
    "actor": "string",
    "createdAt": "string (an ISO-8601 instant)",
    "updatedAt": "string (an ISO-8601 instant)",
}

__all__ = ["delete", "get", "listing", "put"]
