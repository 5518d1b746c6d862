"""A fake GitHub per test (on a manual clock), and an httpx client authenticated against it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from tests.fake_github.support import MARKER_INPUTS
from zuke._clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000_000)


@pytest.fixture
def gh(clock: ManualClock) -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=clock, repos=["acme/app"]) as fake:
        fake.add_workflow("acme/app", "e2e.yml", inputs=MARKER_INPUTS,
                          run_name="${{ inputs.zuke_marker }}", jobs=["unit", "e2e"])  # fmt: skip
        yield fake


@pytest.fixture
def api(gh: FakeGitHub) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {gh.token}", "X-GitHub-Api-Version": "2022-11-28"}
    with httpx.Client(base_url=gh.url, headers=headers, timeout=10) as client:
        yield client
