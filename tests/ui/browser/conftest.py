"""The web view in a real browser: Playwright for Python driving Debian's Chromium.

Every test here is marked ``ui`` (and ``e2e``: it spawns ``zuke serve`` and
``zuke`` processes, so the inner loop leaves it out). Without Chromium
(``apt-get install -y chromium``) the tests skip, saying so — unless
``ZUKE_REQUIRE_BROWSER=1`` (CI, ``.ci/run``), where they fail.

Every page a test opens is guarded: a request for anything but 127.0.0.1 is
refused and recorded, and so is every console error and uncaught script
error; the test fails at its end if there was any.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Route, sync_playwright

from tests.ui.browser.support import CHROMIUM_ARGS, Serve, require_chromium, serve_process


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.ui)
    item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    path = require_chromium()
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@dataclass
class Guard:
    """What a page did that it must not: requests that left loopback, console errors."""

    outside: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@pytest.fixture
def guard() -> Guard:
    return Guard()


@pytest.fixture
def context(browser: Browser, guard: Guard) -> Iterator[BrowserContext]:
    """A fresh browser context (no cookies) whose every request and console error is watched."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})

    def route(r: Route) -> None:
        url = r.request.url
        guard.requested.append(url)
        host = urlsplit(url).hostname
        if host != "127.0.0.1":
            guard.outside.append(url)
            r.abort()
        else:
            r.continue_()

    ctx.route("**/*", route)

    def watch(page: Page) -> None:
        page.on(
            "console",
            lambda m: (
                guard.errors.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning")
                else None
            ),
        )
        page.on("pageerror", lambda e: guard.errors.append(f"page error: {e}"))

    ctx.on("page", watch)
    try:
        yield ctx
    finally:
        ctx.close()
    assert guard.outside == [], f"requests left 127.0.0.1: {guard.outside}"
    assert guard.errors == [], guard.errors


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Serve]:
    with serve_process(tmp_path) as s:
        yield s
