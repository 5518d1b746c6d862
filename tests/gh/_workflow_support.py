"""Helpers for the ``github_workflow`` unit tests: a gate's context without an engine, and
GitHub-shaped runs for respx routes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx

from tests.gh.conftest import START_MS
from zuke._clock import iso
from zuke._engine.context import merge_patch
from zuke._waits import GateState, WaitContext, WaitTrigger
from zuke_gh import GitHubClient, github_workflow
from zuke_gh.workflow import WorkflowSettings

WF = "/repos/acme/app/actions/workflows/e2e.yml"
DISPATCH = f"{WF}/dispatches"
RUNS = f"{WF}/runs"
#: GitHub's Date header at START_MS, and one for a later moment
DATE = "Tue, 14 Nov 2023 22:13:20 GMT"


def http_date(ms: int) -> str:
    from email.utils import formatdate

    return formatdate(ms / 1000, usegmt=True)


def run(
    run_id: int,
    title: str,
    *,
    status: str | None = "queued",
    conclusion: str | None = None,
    created_ms: int = START_MS,
    branch: str = "main",
) -> dict[str, Any]:
    """A workflow run as GitHub lists it (the fields the gate reads)."""
    return {
        "id": run_id,
        "display_title": title,
        "status": status,
        "conclusion": conclusion,
        "event": "workflow_dispatch",
        "head_branch": branch,
        "created_at": iso(created_ms).split(".")[0] + "Z",
        "html_url": f"https://github.com/acme/app/actions/runs/{run_id}",
        "url": f"https://api.github.com/repos/acme/app/actions/runs/{run_id}",
    }


def runs_page(*runs: dict[str, Any], date: str = DATE, **headers: str) -> httpx.Response:
    return httpx.Response(
        200,
        json={"total_count": len(runs), "workflow_runs": list(runs)},
        headers={"Date": date, **headers},
    )


def gate(
    client: GitHubClient, configure: Callable[[WorkflowSettings], Any] | None = None
) -> WaitTrigger:
    """``github_workflow`` on acme/app e2e.yml (main) with ``client`` injected."""

    def settings(g: WorkflowSettings) -> Any:
        g.repo("acme/app").workflow("e2e.yml").client(lambda: client)
        return configure(g) if configure else g

    return github_workflow(settings)


class Probe:
    """One gate's durable state, checked the way the engine and the sweep check it."""

    def __init__(self, run_id: str = "r1", target: str = "e2e", events: list[str] | None = None):
        self.run_id = run_id
        self.target = target
        self.meta: dict[str, Any] = {}
        self.persisted: list[dict[str, Any]] = []
        self.events = [] if events is None else events

    def context(self, now_ms: int = START_MS, shared: dict[str, Any] | None = None) -> WaitContext:
        async def persist() -> None:
            self.events.append("persist")
            self.persisted.append(dict(self.meta))

        def write(patch: Any) -> None:
            self.meta = merge_patch(self.meta, patch)

        return WaitContext(
            run_id=self.run_id, target=self.target, params={}, signals={},
            state=GateState(lambda: dict(self.meta), write), now_ms=now_ms, deadline_ms=None,
            persist=persist, shared={} if shared is None else shared,
        )  # fmt: skip

    def check(
        self, trigger: WaitTrigger, now_ms: int = START_MS, shared: dict[str, Any] | None = None
    ) -> Any:
        return asyncio.run(_ask(trigger, self.context(now_ms, shared)))


async def _ask(trigger: WaitTrigger, ctx: WaitContext) -> Any:
    return await trigger.check(ctx)  # type: ignore[misc]
