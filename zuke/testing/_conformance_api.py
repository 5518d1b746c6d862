"""The conformance kit's HTTP side: one :class:`Api` per check, its errors, fresh ids, races."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from zuke._errors import ZukeError
from zuke.state._http_wire import PROTOCOL_HEADER, PROTOCOL_VERSION

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


def json_of(reply: httpx.Response, what: str) -> Any:
    try:
        return reply.json()
    except ValueError:
        raise ScenarioFailed(f"{what}: the body is not JSON") from None


def expect_status(reply: httpx.Response, want: int | tuple[int, ...], what: str) -> None:
    wanted = (want,) if isinstance(want, int) else want
    check(
        reply.status_code in wanted,
        f"{what}: HTTP {reply.status_code}, expected {' or '.join(map(str, wanted))}"
        f" ({reply.text[:200]})",
    )


def etag_of(reply: httpx.Response, what: str) -> str:
    etag = reply.headers.get("etag")
    check(bool(etag), f"{what}: no ETag")
    return str(etag)


def race(api: Api, n: int, attempt: Callable[[Api, int], httpx.Response]) -> list[int]:
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
