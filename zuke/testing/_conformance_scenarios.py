"""The conformance kit's scenarios: the original's ``STATE_SCENARIOS`` and registry scenarios."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from zuke.state.records import GraphNode, RunRecord, RunStatus
from zuke.state.wire import record_to_json
from zuke.testing._conformance_api import (
    EXTRA_WAIT_MS,
    LIVE_TTL_MS,
    LOCK_TTL_MS,
    RACERS,
    Api,
    check,
    etag_of,
    expect_status,
    fresh,
    json_of,
    race,
)  # fmt: skip

# ------------------------------------------------------------------ runs


def run_body(
    run_id: str, *, target: str = "deploy", status: RunStatus = "running",
    created_at: str = "2026-01-01T00:00:00.000Z", actor: str = "conformance",
) -> dict[str, Any]:  # fmt: skip
    """A whole run record's JSON, as a client would store it."""
    record = RunRecord(
        id=run_id, build="ConformanceBuild", root_target=target, status=status,
        actor=actor, created_at=created_at, updated_at=created_at, graph=(GraphNode(target),),
    )  # fmt: skip
    return record_to_json(record)


def _put_new(api: Api, path: str, body: dict[str, Any], verb: str, what: str) -> str:
    """``PUT path`` with ``If-None-Match: *`` (create it, never overwrite); its ETag."""
    reply = api.call("PUT", path, body=body, headers={"If-None-Match": "*"})
    expect_status(reply, (200, 201), what)
    return etag_of(reply, verb)


def _create(api: Api, body: dict[str, Any]) -> str:
    return _put_new(api, f"/runs/{body['id']}", body, "create", f"create run {body['id']}")


def create_round_trip(api: Api) -> None:
    body = run_body(fresh("run"))
    etag = _create(api, body)
    got = api.call("GET", f"/runs/{body['id']}")
    expect_status(got, 200, "read back")
    check(etag_of(got, "read back") == etag, "read back: the ETag differs from the create's")
    check(json_of(got, "read back") == body, "read back: the record differs from what was stored")
    again = api.call("PUT", f"/runs/{body['id']}", body=body, headers={"If-None-Match": "*"})
    expect_status(again, 412, "a second create of the same id")
    expect_status(api.call("GET", f"/runs/{fresh('absent')}"), 404, "an absent run")


def stale_version_rejected(api: Api) -> None:
    body = run_body(fresh("run"))
    first = _create(api, body)
    newer = {**body, "status": "succeeded", "updatedAt": "2026-01-01T00:00:01.000Z"}
    updated = api.call("PUT", f"/runs/{body['id']}", body=newer, headers={"If-Match": first})
    expect_status(updated, (200, 201), "an update at the current version")
    check(etag_of(updated, "update") != first, "an update kept the old ETag")
    stale = api.call("PUT", f"/runs/{body['id']}", body=body, headers={"If-Match": first})
    expect_status(stale, 412, "an update at a stale version")
    check(json_of(api.call("GET", f"/runs/{body['id']}"), "read")["status"] == "succeeded",
          "a stale update changed the record")  # fmt: skip


def one_of_two_writers_wins(api: Api) -> None:
    body = run_body(fresh("run"))
    version = _create(api, body)

    def write(client: Api, i: int) -> httpx.Response:
        mine = {**body, "actor": f"writer-{i}", "updatedAt": f"2026-01-01T00:00:0{i + 1}.000Z"}
        return client.call("PUT", f"/runs/{body['id']}", body=mine, headers={"If-Match": version})

    statuses = race(api, 2, write)
    check(sorted(statuses) in ([200, 412], [201, 412]),
          f"two writers at one version: {statuses}, expected one 2xx and one 412")  # fmt: skip
    winner = statuses.index(min(statuses))
    got = json_of(api.call("GET", f"/runs/{body['id']}"), "read")
    check(got["actor"] == f"writer-{winner}", "the stored record is not the winner's")


def list_runs_filters(api: Api) -> None:
    target = fresh("target")
    shapes: tuple[tuple[int, RunStatus], ...] = ((1, "running"), (2, "suspended"), (3, "running"))
    runs = [
        run_body(fresh("run"), target=target, status=status, created_at=f"2026-02-0{i}T00:00:00Z")
        for i, status in shapes
    ]
    for body in runs:
        _create(api, body)
    ids = [body["id"] for body in runs]

    def listed(**params: str) -> list[str]:
        reply = api.call("GET", "/runs", params={"target": target, **params})
        expect_status(reply, 200, f"list {params}")
        rows = json_of(reply, "list")
        check(isinstance(rows, list), "list: the body is not an array")
        return [row.get("id") for row in rows]

    check(listed() == ids[::-1], f"by target, newest first: {listed()}")
    check(listed(status="running") == [ids[2], ids[0]], "by status")
    check(listed(since=runs[1]["createdAt"]) == [ids[2], ids[1]], "since (inclusive)")
    check(listed(limit="2") == [ids[2], ids[1]], "limit after ordering")
    row = json_of(api.call("GET", "/runs", params={"target": target, "limit": "1"}), "list")[0]
    keys = ("id", "build", "rootTarget", "status", "actor", "createdAt", "updatedAt")
    check({k: row.get(k) for k in keys} == {k: runs[2][k] for k in keys}, f"a summary: {row}")


def events_round_trip(api: Api) -> None:
    def event(n: int) -> dict[str, Any]:
        return {"at": f"2026-01-01T00:00:0{n}.000Z", "tool": "cancel_run", "actor": f"a{n}",
                "outcome": "ok", "args": {"n": str(n)}}  # fmt: skip

    body = {**run_body(fresh("run")), "events": [event(1)]}
    version = _create(api, body)
    more = {**body, "events": [event(1), event(2), event(3)]}
    expect_status(api.call("PUT", f"/runs/{body['id']}", body=more, headers={"If-Match": version}),
            (200, 201), "an update adding events")  # fmt: skip
    got = json_of(api.call("GET", f"/runs/{body['id']}"), "read")
    check(got.get("events") == more["events"], "the events did not come back in order")


# ------------------------------------------------------------------ locks


def _holder(name: str) -> dict[str, str]:
    return {"actor": name, "runId": fresh("holder"), "since": "2026-01-01T00:00:00.000Z"}


def _acquire(api: Api, key: str, holder: dict[str, str], ttl_ms: int) -> httpx.Response:
    return api.call("POST", f"/locks/{key}", body={"holder": holder, "ttlMs": ttl_ms})


def acquire_then_conflict(api: Api) -> None:
    key, first = fresh("lock"), _holder("first")
    granted = _acquire(api, key, first, LIVE_TTL_MS)
    expect_status(granted, (200, 201), "acquire a free key")
    check(isinstance(json_of(granted, "acquire").get("token"), str), "acquire: no token")
    held = _acquire(api, key, _holder("second"), LIVE_TTL_MS)
    expect_status(held, 409, "acquire a held key")
    check(json_of(held, "conflict") == first, "the conflict does not name the holder")
    token = json_of(granted, "acquire")["token"]
    api.call("DELETE", f"/locks/{key}", body={"token": token})


def expired_lock_taken_over(api: Api) -> None:
    key = fresh("lock")
    first = _acquire(api, key, _holder("first"), LOCK_TTL_MS)
    expect_status(first, (200, 201), "acquire with a short TTL")
    evicted = json_of(first, "acquire")["token"]
    time.sleep((LOCK_TTL_MS + EXTRA_WAIT_MS) / 1000)  # the kit waits for the server's clock
    second = _acquire(api, key, _holder("second"), LIVE_TTL_MS)
    expect_status(second, (200, 201), f"acquire {LOCK_TTL_MS + EXTRA_WAIT_MS} ms after a "
            f"{LOCK_TTL_MS} ms TTL (an expired lock is reclaimed, not refused)")  # fmt: skip
    renew = api.call("PUT", f"/locks/{key}", body={"token": evicted, "ttlMs": LIVE_TTL_MS})
    expect_status(renew, (404, 409), "renew with the evicted token")
    token = json_of(second, "acquire")["token"]
    renewed = api.call("PUT", f"/locks/{key}", body={"token": token, "ttlMs": LIVE_TTL_MS})
    expect_status(renewed, (200, 201, 204), "renew by the new holder")
    api.call("DELETE", f"/locks/{key}", body={"token": token})


def one_of_many_acquirers_wins(api: Api) -> None:
    key = fresh("lock")
    statuses = race(api, RACERS, lambda c, i: _acquire(c, key, _holder(f"r{i}"), LIVE_TTL_MS))
    granted = [s for s in statuses if s in (200, 201)]
    check(len(granted) == 1 and statuses.count(409) == RACERS - 1,
          f"{RACERS} acquirers: {sorted(statuses)}, expected one 2xx and the rest 409")  # fmt: skip


def absent_lock_calls_are_safe(api: Api) -> None:
    key, token = fresh("absent-lock"), uuid.uuid4().hex
    renew = api.call("PUT", f"/locks/{key}", body={"token": token, "ttlMs": LIVE_TTL_MS})
    expect_status(renew, (404, 409), "renew of an absent lock")
    release = api.call("DELETE", f"/locks/{key}", body={"token": token})
    expect_status(release, (200, 202, 204, 404), "release of an absent lock")


# ------------------------------------------------------------------ the build catalog


def descriptor(
    build_id: str, *, name: str | None = None, created_at: str = "2026-03-01T00:00:00.000Z"
) -> dict[str, Any]:
    return {
        "id": build_id, "name": name or build_id,
        "location": {"kind": "module", "module": "./build.ts", "cwd": "/repo"},
        "surface": {"targets": [{"name": "deploy", "dependsOn": []}], "flags": []},
        "actor": "conformance", "createdAt": created_at, "updatedAt": created_at,
    }  # fmt: skip


def _register(api: Api, body: dict[str, Any]) -> str:
    return _put_new(api, f"/builds/{body['id']}", body, "register", f"register {body['id']}")


def register_round_trip(api: Api) -> None:
    body = descriptor(fresh("build"))
    etag = _register(api, body)
    got = api.call("GET", f"/builds/{body['id']}")
    expect_status(got, 200, "read back")
    check(etag_of(got, "read back") == etag, "read back: the ETag differs from the register's")
    check(json_of(got, "read back") == body, "read back: the descriptor differs")


def stale_build_rejected(api: Api) -> None:
    body = descriptor(fresh("build"))
    first = _register(api, body)
    newer = {**body, "updatedAt": "2026-03-02T00:00:00.000Z"}
    updated = api.call("PUT", f"/builds/{body['id']}", body=newer, headers={"If-Match": first})
    expect_status(updated, (200, 201), "an update at the current version")
    stale = api.call("PUT", f"/builds/{body['id']}", body=body, headers={"If-Match": first})
    expect_status(stale, 412, "an update at a stale version")


def deregister_removes(api: Api) -> None:
    body = descriptor(fresh("build"))
    _register(api, body)
    expect_status(api.call("DELETE", f"/builds/{body['id']}"), (200, 202, 204), "deregister")
    expect_status(api.call("GET", f"/builds/{body['id']}"), 404, "read after deregister")


def list_builds_filters(api: Api) -> None:
    name = fresh("name")
    bodies = [descriptor(fresh("build"), name=name, created_at=f"2026-03-0{i}T00:00:00.000Z")
              for i in (1, 2, 3)]  # fmt: skip
    for body in bodies:
        _register(api, body)
    ids = [b["id"] for b in bodies]

    def listed(**params: str) -> list[str]:
        reply = api.call("GET", "/builds", params={"name": name, **params})
        expect_status(reply, 200, f"list builds {params}")
        return [row.get("id") for row in json_of(reply, "list builds")]

    check(listed() == ids[::-1], f"by name, newest first: {listed()}")
    check(listed(since=bodies[1]["createdAt"]) == [ids[2], ids[1]], "since (inclusive)")


Scenario = tuple[str, Callable[[Api], None]]
STATE_SCENARIOS: tuple[Scenario, ...] = (
    ("create and read back a run", create_round_trip),
    ("a stale version is rejected", stale_version_rejected),
    ("two writers at one version: exactly one wins", one_of_two_writers_wins),
    ("list runs by target, status, since and limit, newest first", list_runs_filters),
    ("events round-trip in order", events_round_trip),
    ("acquire grants a token; a second acquire conflicts naming the holder", acquire_then_conflict),
    ("an expired lock is taken over; the evicted token cannot renew", expired_lock_taken_over),
    ("concurrent acquires: exactly one wins", one_of_many_acquirers_wins),
    ("renew and release of an absent lock are safe", absent_lock_calls_are_safe),
)
REGISTRY_SCENARIOS: tuple[Scenario, ...] = (
    ("register and read back a build", register_round_trip),
    ("a stale build version is rejected", stale_build_rejected),
    ("deregister removes the build", deregister_removes),
    ("list builds by name and since, newest first", list_builds_filters),
)
