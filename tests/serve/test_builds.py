"""The build catalog ``/builds``: the original's conformance scenarios, and its refusals.

The scenarios of the TypeScript conformance kit's registry part (register
round-trip, stale CAS rejected, deregister removes, list filters by name and
since, newest first) plus "registration keeps createdAt", against a
:class:`StateServer` in process, over HTTP. Ids are fresh per test, so the
scenarios share one server the way the kit shares a persistent backend.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.serve.support import in_process


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    with in_process(tmp_path_factory.mktemp("builds")) as (_, client):
        yield client


def fresh(prefix: str = "Build") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def descriptor(build_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": build_id,
        "name": fields.pop("name", build_id),
        "location": {"kind": "module", "module": "./build.ts", "cwd": "/repo"},
        "surface": {"targets": [{"name": "deploy", "dependsOn": ["build"]}], "flags": []},
        "actor": "ci@example",
        "createdAt": "2026-02-01T10:00:00.000Z",
        "updatedAt": "2026-02-01T10:00:00.000Z",
        **fields,
    }


def register(raw: httpx.Client, body: dict[str, Any], prefix: str = "") -> str:
    reply = raw.put(f"{prefix}/builds/{body['id']}", headers={"If-None-Match": "*"}, json=body)
    assert reply.status_code == 201, reply.text
    return reply.headers["etag"]


def test_a_registered_build_round_trips_verbatim_with_its_etag(raw: httpx.Client) -> None:
    body = descriptor(fresh(), extra={"unknown": ["kept", 1, None]})
    etag = register(raw, body)
    reply = raw.get(f"/builds/{body['id']}")
    assert reply.status_code == 200
    assert reply.headers["etag"] == etag
    assert reply.json() == body


def test_an_update_at_the_current_etag_lands_and_a_stale_one_is_412(raw: httpx.Client) -> None:
    body = descriptor(fresh())
    first = register(raw, body)
    newer = {**body, "updatedAt": "2026-02-02T10:00:00.000Z", "actor": "someone-else"}
    updated = raw.put(f"/builds/{body['id']}", headers={"If-Match": first}, json=newer)
    assert updated.status_code == 200
    second = updated.headers["etag"]
    assert second != first
    stale = raw.put(f"/builds/{body['id']}", headers={"If-Match": first}, json=body)
    assert stale.status_code == 412
    again = raw.put(f"/builds/{body['id']}", headers={"If-None-Match": "*"}, json=body)
    assert again.status_code == 412
    assert raw.get(f"/builds/{body['id']}").json()["actor"] == "someone-else"


def test_registration_keeps_the_first_created_at(raw: httpx.Client) -> None:
    build_id = fresh()
    etag = register(raw, descriptor(build_id))
    later = descriptor(
        build_id, createdAt="2026-03-01T00:00:00.000Z", updatedAt="2026-03-01T00:00:00.000Z"
    )
    assert raw.put(f"/builds/{build_id}", headers={"If-Match": etag}, json=later).is_success
    stored = raw.get(f"/builds/{build_id}").json()
    assert (stored["createdAt"], stored["updatedAt"]) == (
        "2026-02-01T10:00:00.000Z",
        "2026-03-01T00:00:00.000Z",
    )
    listed = raw.get("/builds", params={"name": build_id}).json()
    assert [b["createdAt"] for b in listed] == ["2026-02-01T10:00:00.000Z"]


def test_deregister_removes_and_deregistering_again_is_404(raw: httpx.Client) -> None:
    body = descriptor(fresh())
    register(raw, body)
    assert raw.delete(f"/builds/{body['id']}").status_code == 200
    assert raw.get(f"/builds/{body['id']}").status_code == 404
    assert raw.delete(f"/builds/{body['id']}").status_code == 404  # a client treats it as done
    assert raw.get("/builds", params={"name": body["name"]}).json() == []


def test_list_filters_by_name_and_since_newest_first(raw: httpx.Client) -> None:
    name = fresh("Name")
    stamps = ["2026-04-01T00:00:00.000Z", "2026-04-02T00:00:00.000Z", "2026-04-03T00:00:00.000Z"]
    ids = [fresh(f"b{i}") for i in range(3)]
    for build_id, at in zip(ids, stamps, strict=True):
        register(raw, descriptor(build_id, name=name, createdAt=at, updatedAt=at))
    register(raw, descriptor(fresh(), name=fresh("Other"), createdAt=stamps[2]))
    listed = raw.get("/builds", params={"name": name}).json()
    assert [b["id"] for b in listed] == ids[::-1]
    assert set(listed[0]) == {"id", "name", "actor", "createdAt", "updatedAt"}
    since = raw.get("/builds", params={"name": name, "since": stamps[1]}).json()
    assert [b["id"] for b in since] == [ids[2], ids[1]]  # inclusive


def test_since_is_a_time_with_offsets_and_fractions(raw: httpx.Client) -> None:
    name = fresh("Timed")
    build_id = fresh()
    register(raw, descriptor(build_id, name=name, createdAt="2026-01-15T00:00:00.500Z"))
    for since in ("2026-01-15T00:00:00Z", "2026-01-15T05:30:00.500+05:30"):
        listed = raw.get("/builds", params={"name": name, "since": since}).json()
        assert [b["id"] for b in listed] == [build_id], since
    later = raw.get("/builds", params={"name": name, "since": "2026-01-15T00:00:00.501Z"})
    assert later.json() == []
    assert raw.get("/builds", params={"since": "last tuesday"}).status_code == 400


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": "someone-else"}, "not"),
        ({"name": ""}, "name must be"),
        ({"actor": 7}, "actor must be"),
        ({"createdAt": "yesterday"}, "ISO-8601"),
        ({"updatedAt": None}, "updatedAt must be"),
    ],
)
def test_a_descriptor_with_a_bad_indexed_field_is_refused_with_400(
    raw: httpx.Client, change: dict[str, Any], message: str
) -> None:
    build_id = fresh()
    body = {**descriptor(build_id), **change}
    reply = raw.put(f"/builds/{build_id}", headers={"If-None-Match": "*"}, json=body)
    assert reply.status_code == 400
    assert message in reply.json()["error"]
    assert raw.get(f"/builds/{build_id}").status_code == 404


def test_a_write_without_a_precondition_is_428_and_a_body_not_an_object_400(
    raw: httpx.Client,
) -> None:
    build_id = fresh()
    assert raw.put(f"/builds/{build_id}", json=descriptor(build_id)).status_code == 428
    assert (
        raw.put(f"/builds/{build_id}", headers={"If-None-Match": "*"}, json=[1]).status_code == 400
    )
    assert raw.post(f"/builds/{build_id}", json={}).status_code == 405
    assert raw.get(f"/builds/{'x' * 201}").status_code == 400


def test_builds_are_per_namespace(raw: httpx.Client) -> None:
    body = descriptor(fresh())
    register(raw, body, prefix="/ns/team-a")
    assert raw.get(f"/ns/team-a/builds/{body['id']}").status_code == 200
    assert raw.get(f"/ns/team-b/builds/{body['id']}").status_code == 404
    assert raw.get(f"/builds/{body['id']}").status_code == 404


def test_a_builds_table_survives_a_restart(tmp_path: Path) -> None:
    body = descriptor(fresh())
    with in_process(tmp_path) as (_, client):
        etag = register(client, body)
    with in_process(tmp_path) as (_, client):
        reply = client.get(f"/builds/{body['id']}")
        assert (reply.status_code, reply.headers["etag"]) == (200, etag)
        assert json.loads(reply.content) == body
