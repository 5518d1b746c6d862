"""The state API conformance kit: does a service speak the Zuke state HTTP API?

``python -m zuke.testing.conformance --url BASE [--token T]`` runs the
original TypeScript Zuke's scenarios (its ``STATE_SCENARIOS`` and registry
scenarios) over HTTP against a running service — ``zuke serve`` on SQLite or
Postgres, each replica of a deployment, or anyone's implementation. It prints
``PASS  <name>`` or ``FAIL  <name>`` with the reason indented, then
``k/n scenarios passed.``; it exits 0 only when every scenario passed.

Every scenario uses fresh uuid-suffixed ids and keys, so the kit is safe to
run against a shared, persistent backend. A failure that is not the
service's answer — the service cannot be reached, refuses the token, or
speaks another protocol version — stops the kit with ``conformance: aborted
— …`` (exit 1). The token may come from ``ZUKE_STATE_TOKEN`` instead of
``--token``, which keeps it out of process listings; it is never printed.

Programmatic use: :func:`check_state_api` and :func:`check_build_registry`
return a :class:`ScenarioResult` per scenario; :class:`Aborted` is raised
for the failures above.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import httpx

from zuke._errors import ZukeError
from zuke.state._http_wire import PROTOCOL_HEADER, PROTOCOL_VERSION
from zuke.state.records import GraphNode, RunRecord, RunStatus
from zuke.state.wire import record_to_json

#: the original's numbers: a short lock's TTL, how much longer to wait, a live lock's TTL
LOCK_TTL_MS = 200
EXTRA_WAIT_MS = 150
LIVE_TTL_MS = 3_600_000
RACERS = 8
TIMEOUT_S = 30.0
TOKEN_ENV = "ZUKE_STATE_TOKEN"


class Aborted(ZukeError):
    """Not the service's answer: unreachable, a refused token, or another protocol."""


class ScenarioFailed(ZukeError, AssertionError):
    """The service answered, but not as the API says."""


@dataclass(frozen=True)
class ScenarioResult:
    name: str
    ok: bool
    error: str | None = None


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ScenarioFailed(message)


class Api:
    """Requests to one base URL, with the protocol header and the token."""

    def __init__(self, base_url: str, token: str | None, *, timeout_s: float = TIMEOUT_S) -> None:
        self.base_url = base_url.rstrip("/")
        self._token = token
        self._timeout_s = timeout_s
        headers = {PROTOCOL_HEADER: PROTOCOL_VERSION}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(headers=headers, timeout=timeout_s, follow_redirects=False)

    def fork(self) -> Api:
        """Another client, with its own connections (for races)."""
        return Api(self.base_url, self._token, timeout_s=self._timeout_s)

    def close(self) -> None:
        self._client.close()

    def call(
        self, method: str, path: str, *, body: Any = None, headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:  # fmt: skip
        try:
            reply = self._client.request(
                method, self.base_url + path, json=body, headers=headers, params=params
            )
        except httpx.HTTPError as exc:
            raise Aborted(f"{method} {path}: {str(exc) or type(exc).__name__}") from None
        spoken = reply.headers.get(PROTOCOL_HEADER)
        if spoken is not None and spoken.strip() != PROTOCOL_VERSION:
            raise Aborted(
                f"state-api protocol mismatch: the service speaks {spoken.strip()[:20]!r}, "
                f"this kit {PROTOCOL_VERSION!r}"
            )
        if reply.status_code == 401:
            raise Aborted("the service refused the token (HTTP 401): check --token")
        return reply


def fresh(what: str) -> str:
    return f"conformance-{what}-{uuid.uuid4().hex[:12]}"


def _json(reply: httpx.Response, what: str) -> Any:
    try:
        return reply.json()
    except ValueError:
        raise ScenarioFailed(f"{what}: the body is not JSON") from None


def _status(reply: httpx.Response, want: int | tuple[int, ...], what: str) -> None:
    wanted = (want,) if isinstance(want, int) else want
    check(
        reply.status_code in wanted,
        f"{what}: HTTP {reply.status_code}, expected {' or '.join(map(str, wanted))}"
        f" ({reply.text[:200]})",
    )


def _etag(reply: httpx.Response, what: str) -> str:
    etag = reply.headers.get("etag")
    check(bool(etag), f"{what}: no ETag")
    return str(etag)


def _race(api: Api, n: int, attempt: Callable[[Api, int], httpx.Response]) -> list[int]:
    """``attempt`` from ``n`` clients released together; their statuses (or :class:`Aborted`)."""
    clients = [api.fork() for _ in range(n)]
    barrier = threading.Barrier(n)
    statuses: list[int | BaseException] = [0] * n

    def go(i: int) -> None:
        try:
            barrier.wait(TIMEOUT_S)
            statuses[i] = attempt(clients[i], i).status_code
        except BaseException as exc:  # re-raised below, on the kit's thread
            statuses[i] = exc

    threads = [threading.Thread(target=go, args=(i,), daemon=True) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S * 2)
    for client in clients:
        client.close()
    for status in statuses:
        if isinstance(status, BaseException):
            raise status
    return [int(s) for s in statuses]  # type: ignore[arg-type]


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


def _create(api: Api, body: dict[str, Any]) -> str:
    reply = api.call("PUT", f"/runs/{body['id']}", body=body, headers={"If-None-Match": "*"})
    _status(reply, (200, 201), f"create run {body['id']}")
    return _etag(reply, "create")


def create_round_trip(api: Api) -> None:
    body = run_body(fresh("run"))
    etag = _create(api, body)
    got = api.call("GET", f"/runs/{body['id']}")
    _status(got, 200, "read back")
    check(_etag(got, "read back") == etag, "read back: the ETag differs from the create's")
    check(_json(got, "read back") == body, "read back: the record differs from what was stored")
    again = api.call("PUT", f"/runs/{body['id']}", body=body, headers={"If-None-Match": "*"})
    _status(again, 412, "a second create of the same id")
    _status(api.call("GET", f"/runs/{fresh('absent')}"), 404, "an absent run")


def stale_version_rejected(api: Api) -> None:
    body = run_body(fresh("run"))
    first = _create(api, body)
    newer = {**body, "status": "succeeded", "updatedAt": "2026-01-01T00:00:01.000Z"}
    updated = api.call("PUT", f"/runs/{body['id']}", body=newer, headers={"If-Match": first})
    _status(updated, (200, 201), "an update at the current version")
    check(_etag(updated, "update") != first, "an update kept the old ETag")
    stale = api.call("PUT", f"/runs/{body['id']}", body=body, headers={"If-Match": first})
    _status(stale, 412, "an update at a stale version")
    check(_json(api.call("GET", f"/runs/{body['id']}"), "read")["status"] == "succeeded",
          "a stale update changed the record")  # fmt: skip


def one_of_two_writers_wins(api: Api) -> None:
    body = run_body(fresh("run"))
    version = _create(api, body)

    def write(client: Api, i: int) -> httpx.Response:
        mine = {**body, "actor": f"writer-{i}", "updatedAt": f"2026-01-01T00:00:0{i + 1}.000Z"}
        return client.call("PUT", f"/runs/{body['id']}", body=mine, headers={"If-Match": version})

    statuses = _race(api, 2, write)
    check(sorted(statuses) in ([200, 412], [201, 412]),
          f"two writers at one version: {statuses}, expected one 2xx and one 412")  # fmt: skip
    winner = statuses.index(min(statuses))
    got = _json(api.call("GET", f"/runs/{body['id']}"), "read")
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
        _status(reply, 200, f"list {params}")
        rows = _json(reply, "list")
        check(isinstance(rows, list), "list: the body is not an array")
        return [row.get("id") for row in rows]

    check(listed() == ids[::-1], f"by target, newest first: {listed()}")
    check(listed(status="running") == [ids[2], ids[0]], "by status")
    check(listed(since=runs[1]["createdAt"]) == [ids[2], ids[1]], "since (inclusive)")
    check(listed(limit="2") == [ids[2], ids[1]], "limit after ordering")
    row = _json(api.call("GET", "/runs", params={"target": target, "limit": "1"}), "list")[0]
    keys = ("id", "build", "rootTarget", "status", "actor", "createdAt", "updatedAt")
    check({k: row.get(k) for k in keys} == {k: runs[2][k] for k in keys}, f"a summary: {row}")


def events_round_trip(api: Api) -> None:
    def event(n: int) -> dict[str, Any]:
        return {"at": f"2026-01-01T00:00:0{n}.000Z", "tool": "cancel_run", "actor": f"a{n}",
                "outcome": "ok", "args": {"n": str(n)}}  # fmt: skip

    body = {**run_body(fresh("run")), "events": [event(1)]}
    version = _create(api, body)
    more = {**body, "events": [event(1), event(2), event(3)]}
    _status(api.call("PUT", f"/runs/{body['id']}", body=more, headers={"If-Match": version}),
            (200, 201), "an update adding events")  # fmt: skip
    got = _json(api.call("GET", f"/runs/{body['id']}"), "read")
    check(got.get("events") == more["events"], "the events did not come back in order")


# ------------------------------------------------------------------ locks


def _holder(name: str) -> dict[str, str]:
    return {"actor": name, "runId": fresh("holder"), "since": "2026-01-01T00:00:00.000Z"}


def _acquire(api: Api, key: str, holder: dict[str, str], ttl_ms: int) -> httpx.Response:
    return api.call("POST", f"/locks/{key}", body={"holder": holder, "ttlMs": ttl_ms})


def acquire_then_conflict(api: Api) -> None:
    key, first = fresh("lock"), _holder("first")
    granted = _acquire(api, key, first, LIVE_TTL_MS)
    _status(granted, (200, 201), "acquire a free key")
    check(isinstance(_json(granted, "acquire").get("token"), str), "acquire: no token")
    held = _acquire(api, key, _holder("second"), LIVE_TTL_MS)
    _status(held, 409, "acquire a held key")
    check(_json(held, "conflict") == first, "the conflict does not name the holder")
    token = _json(granted, "acquire")["token"]
    api.call("DELETE", f"/locks/{key}", body={"token": token})


def expired_lock_taken_over(api: Api) -> None:
    key = fresh("lock")
    first = _acquire(api, key, _holder("first"), LOCK_TTL_MS)
    _status(first, (200, 201), "acquire with a short TTL")
    evicted = _json(first, "acquire")["token"]
    time.sleep((LOCK_TTL_MS + EXTRA_WAIT_MS) / 1000)  # the kit waits for the server's clock
    second = _acquire(api, key, _holder("second"), LIVE_TTL_MS)
    _status(second, (200, 201), f"acquire {LOCK_TTL_MS + EXTRA_WAIT_MS} ms after a "
            f"{LOCK_TTL_MS} ms TTL (an expired lock is reclaimed, not refused)")  # fmt: skip
    renew = api.call("PUT", f"/locks/{key}", body={"token": evicted, "ttlMs": LIVE_TTL_MS})
    _status(renew, (404, 409), "renew with the evicted token")
    token = _json(second, "acquire")["token"]
    renewed = api.call("PUT", f"/locks/{key}", body={"token": token, "ttlMs": LIVE_TTL_MS})
    _status(renewed, (200, 201, 204), "renew by the new holder")
    api.call("DELETE", f"/locks/{key}", body={"token": token})


def one_of_many_acquirers_wins(api: Api) -> None:
    key = fresh("lock")
    statuses = _race(api, RACERS, lambda c, i: _acquire(c, key, _holder(f"r{i}"), LIVE_TTL_MS))
    granted = [s for s in statuses if s in (200, 201)]
    check(len(granted) == 1 and statuses.count(409) == RACERS - 1,
          f"{RACERS} acquirers: {sorted(statuses)}, expected one 2xx and the rest 409")  # fmt: skip


def absent_lock_calls_are_safe(api: Api) -> None:
    key, token = fresh("absent-lock"), uuid.uuid4().hex
    renew = api.call("PUT", f"/locks/{key}", body={"token": token, "ttlMs": LIVE_TTL_MS})
    _status(renew, (404, 409), "renew of an absent lock")
    release = api.call("DELETE", f"/locks/{key}", body={"token": token})
    _status(release, (200, 202, 204, 404), "release of an absent lock")


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
    reply = api.call("PUT", f"/builds/{body['id']}", body=body, headers={"If-None-Match": "*"})
    _status(reply, (200, 201), f"register {body['id']}")
    return _etag(reply, "register")


def register_round_trip(api: Api) -> None:
    body = descriptor(fresh("build"))
    etag = _register(api, body)
    got = api.call("GET", f"/builds/{body['id']}")
    _status(got, 200, "read back")
    check(_etag(got, "read back") == etag, "read back: the ETag differs from the register's")
    check(_json(got, "read back") == body, "read back: the descriptor differs")


def stale_build_rejected(api: Api) -> None:
    body = descriptor(fresh("build"))
    first = _register(api, body)
    newer = {**body, "updatedAt": "2026-03-02T00:00:00.000Z"}
    updated = api.call("PUT", f"/builds/{body['id']}", body=newer, headers={"If-Match": first})
    _status(updated, (200, 201), "an update at the current version")
    stale = api.call("PUT", f"/builds/{body['id']}", body=body, headers={"If-Match": first})
    _status(stale, 412, "an update at a stale version")


def deregister_removes(api: Api) -> None:
    body = descriptor(fresh("build"))
    _register(api, body)
    _status(api.call("DELETE", f"/builds/{body['id']}"), (200, 202, 204), "deregister")
    _status(api.call("GET", f"/builds/{body['id']}"), 404, "read after deregister")


def list_builds_filters(api: Api) -> None:
    name = fresh("name")
    bodies = [descriptor(fresh("build"), name=name, created_at=f"2026-03-0{i}T00:00:00.000Z")
              for i in (1, 2, 3)]  # fmt: skip
    for body in bodies:
        _register(api, body)
    ids = [b["id"] for b in bodies]

    def listed(**params: str) -> list[str]:
        reply = api.call("GET", "/builds", params={"name": name, **params})
        _status(reply, 200, f"list builds {params}")
        return [row.get("id") for row in _json(reply, "list builds")]

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


Report = Callable[[ScenarioResult], None]


def _check(
    url: str, token: str | None, scenarios: Sequence[Scenario], report: Report | None
) -> list[ScenarioResult]:
    api = Api(url, token)
    results: list[ScenarioResult] = []
    try:
        for name, scenario in scenarios:
            try:
                scenario(api)
                result = ScenarioResult(name, ok=True)
            except (ScenarioFailed, KeyError, TypeError, AttributeError, IndexError) as exc:
                result = ScenarioResult(name, ok=False, error=str(exc) or type(exc).__name__)
            results.append(result)
            if report is not None:
                report(result)
    finally:
        api.close()
    return results


def check_state_api(
    url: str, token: str | None = None, *, report: Report | None = None
) -> list[ScenarioResult]:
    """Run :data:`STATE_SCENARIOS` against the service at ``url``; :class:`Aborted` if it cannot."""
    return _check(url, token, STATE_SCENARIOS, report)


def check_build_registry(
    url: str, token: str | None = None, *, report: Report | None = None
) -> list[ScenarioResult]:
    """Run :data:`REGISTRY_SCENARIOS` against the service at ``url``."""
    return _check(url, token, REGISTRY_SCENARIOS, report)


def _args(argv: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    items = iter(argv)
    for arg in items:
        name, eq, value = arg.partition("=")
        if name in ("--url", "--token"):
            found[name[2:]] = value if eq else next(items, "")
    return found


def main(
    argv: Sequence[str] | None = None, *, out: TextIO | None = None,
    err: TextIO | None = None, env: Mapping[str, str] | None = None,
) -> int:  # fmt: skip
    """The command line; the exit code (0: every scenario passed)."""
    out, err = out or sys.stdout, err or sys.stderr
    args = _args(sys.argv[1:] if argv is None else argv)
    if not args.get("url"):
        print("conformance: --url <base> is required.", file=err)
        return 1
    token = args.get("token") or (os.environ if env is None else env).get(TOKEN_ENV) or None

    def report(result: ScenarioResult) -> None:
        print(f"{'PASS' if result.ok else 'FAIL'}  {result.name}", file=out)
        if result.error:
            print(f"      {result.error}", file=out)
        out.flush()

    results: list[ScenarioResult] = []
    try:
        results += check_state_api(args["url"], token, report=report)
        results += check_build_registry(args["url"], token, report=report)
    except Aborted as exc:
        text = str(exc).replace(token, "***") if token else str(exc)
        print(f"conformance: aborted — {text}", file=err)
        return 1
    passed = sum(r.ok for r in results)
    print(f"{passed}/{len(results)} scenarios passed.", file=out)
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
