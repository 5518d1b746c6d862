"""Fixtures for the GitHub client tests: a respx router as the transport, a
recording sleep and a manual clock (no real waiting, no network)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import respx

from zuke._clock import ManualClock
from zuke_gh import GitHubClient, RetryPolicy

API = "https://api.github.com"
#: A distinctive token: every failure path is checked for its absence.
TOKEN = "ghp_SECRETtoken0123456789abcdefSECRET"
#: 2023-11-14T22:13:20Z, the ManualClock's default start, as an HTTP Date header.
DATE = "Tue, 14 Nov 2023 22:13:20 GMT"
START_MS = 1_700_000_000_000


class Sleeps:
    """Stands in for ``time.sleep``: records the waits and moves the clock."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.clock.advance(int(seconds * 1000))


@pytest.fixture
def router() -> respx.Router:
    return respx.Router(base_url=API, assert_all_called=False)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def sleeps(clock: ManualClock) -> Sleeps:
    return Sleeps(clock)


MakeClient = Callable[..., GitHubClient]


@pytest.fixture
def make_client(router: respx.Router, clock: ManualClock, sleeps: Sleeps) -> Iterator[MakeClient]:
    """A client on the router; jitter off so waits are exact (override any option)."""
    made: list[GitHubClient] = []

    def make(**options: Any) -> GitHubClient:
        settings: dict[str, Any] = {
            "token": TOKEN,
            "base_url": API,
            "transport": httpx.MockTransport(router.handler),
            "retry": RetryPolicy(jitter=0.0),
            "clock": clock,
            "sleep": sleeps,
            "rand": lambda: 0.5,
        }
        settings.update(options)
        client = GitHubClient(**settings)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
