"""The pictures' pages, and their screenshots by Debian's Chromium (Playwright).

:func:`pages_of` names each page's PNG; :func:`shoot` loads each page's HTML into a fresh
page (no server: ``set_content``) with every request refused and recorded — a page that
asked for anything fails the run — and saves a ~1,100-pixel-wide screenshot of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from playwright.sync_api import Route, sync_playwright

from tests.fake_github.pictures.pages import environments_page, history_page, issue_page
from tests.fake_github.pictures.story import Snapshot, Story
from tests.ui.browser.support import CHROMIUM_ARGS, chromium_path

WIDTH = 1100
#: a page taller than this is cut (the pictures stay small: under 200 KB each)
MAX_HEIGHT = 1500


def pages_of(snap: Snapshot, story: Story) -> dict[str, str]:
    """File name -> the page's HTML, for the story's four pictures."""
    return {
        "github-environments.png": environments_page(snap),
        "github-deployment-history.png": history_page(snap, "production"),
        "github-dashboard-issue.png": issue_page(snap, story.dashboard),
        "github-approval-issue.png": issue_page(snap, story.approval),
    }


def shoot(pages: Mapping[str, str], out: Path) -> list[Path]:
    """Screenshot each page into ``out``; the PNGs' paths. Fails if a page made a request."""
    out.mkdir(parents=True, exist_ok=True)
    asked: list[str] = []

    def refuse(route: Route) -> None:
        asked.append(route.request.url)
        route.abort()

    saved = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=chromium_path(), headless=True, args=CHROMIUM_ARGS
        )
        try:
            context = browser.new_context(viewport={"width": WIDTH, "height": 700})
            context.route("**/*", refuse)
            page = context.new_page()
            for name, html in pages.items():
                page.set_content(html)
                height = min(MAX_HEIGHT, page.evaluate("document.documentElement.scrollHeight"))
                path = out / name
                page.screenshot(path=path, clip={"x": 0, "y": 0, "width": WIDTH,
                                                 "height": height}, full_page=True)  # fmt: skip
                saved.append(path)
        finally:
            browser.close()
    assert asked == [], f"a page asked for {asked}"
    return saved
