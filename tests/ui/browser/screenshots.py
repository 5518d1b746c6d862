"""The screenshots of ``docs/ui.md``, taken the way the browser tests work.

Run from the repository's root (Chromium on PATH)::

    python -m tests.ui.browser.screenshots docs/img

It starts a real ``zuke serve`` on a fresh SQLite file, runs the demo release
(``docs/demo``) twice — one finished, one suspended at QA holding its staging
lock — adds a failed run and a 1,000-target run through the state API, signs
in through the login form and saves a PNG of each page.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from tests.ui.browser.support import CHROMIUM_ARGS, demo_release, serve_process, zuke
from tests.ui.support import TOKEN
from zuke._clock import SYSTEM_CLOCK, iso
from zuke.state.records import GraphNode, RunRecord, TargetRecord, WaitingFor
from zuke.state.wire import record_to_json


def big_run(now: int) -> RunRecord:
    names = [f"pkg-{k:04d}" for k in range(1000)]
    graph = tuple(
        GraphNode(n, tuple(names[j] for j in {k - 1, k - 9} if 0 <= j < k))
        for k, n in enumerate(names)
    )
    targets = {}
    for k, n in enumerate(names):
        at = iso(now - 600_000 + k * 500)
        if k < 930:
            targets[n] = TargetRecord(status="succeeded", started_at=at, ended_at=at)
        elif k == 930:
            targets[n] = TargetRecord(
                status="failed",
                started_at=at,
                ended_at=at,
                error="exit 2: checksum mismatch (after 3 attempts)",
            )
        elif k < 935:
            targets[n] = TargetRecord(status="skipped")
    targets[names[940]] = TargetRecord(
        status="waiting",
        started_at=iso(now),
        waiting_for=WaitingFor(trigger="signal:go", deadline=iso(now + 86_400_000)),
    )
    return RunRecord(
        id="monorepo-1000",
        build="Monorepo",
        root_target=names[-1],
        status="failed",
        actor="ci-bot",
        created_at=iso(now - 600_000),
        updated_at=iso(now),
        graph=graph,
        targets=targets,
    )


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, serve_process(Path(tmp)) as serve:
        work = Path(tmp)
        done = demo_release(work / "done", serve, service="web")
        zuke(
            ["resume", done, "--signal", "qa-approved", "--data", '{"by": "qa-lead"}'],
            work / "done",
            serve.client_env(),
        )
        waiting = demo_release(work / "waiting", serve, service="api")
        big = big_run(SYSTEM_CLOCK.now_ms())
        answer = httpx.put(
            f"{serve.url}/runs/{big.id}",
            json=record_to_json(big),
            headers={"Authorization": f"Bearer {TOKEN}", "If-None-Match": "*"},
        )
        answer.raise_for_status()
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=shutil.which("chromium"), headless=True, args=CHROMIUM_ARGS
            )
            page = browser.new_page(viewport={"width": 1280, "height": 860})
            page.goto(f"{serve.url}/ui/")
            page.screenshot(path=out / "ui-login.png")
            page.get_by_label("Token").fill(TOKEN)
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(f"{serve.url}/ui/")
            page.wait_for_selector("html[data-live=open]")
            page.screenshot(path=out / "ui-runs.png")
            for name, path in (
                ("ui-run-waiting.png", f"/ui/runs/{waiting}"),
                ("ui-run-done.png", f"/ui/runs/{done}"),
            ):
                page.goto(serve.url + path)
                page.wait_for_selector("html[data-live=open]")
                page.screenshot(path=out / name, full_page=True)
            page.goto(f"{serve.url}/ui/runs/{big.id}")
            page.locator("svg a.node.s-failed").scroll_into_view_if_needed()  # where it stopped
            page.locator("figure.graph").screenshot(path=out / "ui-graph-1000.png")
            page.goto(f"{serve.url}/ui/locks")
            page.wait_for_selector("html[data-live=open]")
            page.screenshot(path=out / "ui-locks.png")
            browser.close()
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img"))
