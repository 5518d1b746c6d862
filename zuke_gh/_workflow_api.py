"""The REST calls behind ``github_workflow``, and the per-sweep memo that keeps them few.

One sweep may check fifty gates waiting on the same workflow. Each would
otherwise list the workflow's runs (or fetch its own run) — fifty requests
for one answer. So the listing of a (base URL, repository, workflow, branch)
is fetched once per sweep, lazily, page by page, into ``ctx.shared``
(:class:`RunListing`): every gate scans the same pages, and only a gate that
needs an older page fetches it, for everyone. A run that is not in the pages
worth fetching is looked up by id, memoised by id. Polls are conditional
(``etag=True``): a client that outlives a sweep gets 304s, which GitHub does
not count against the rate limit.

Everything here is synchronous (the client is); the gate calls it through
``asyncio.to_thread`` under the listing's :class:`asyncio.Lock`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zuke._clock import parse_iso
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

RUNS = "/repos/{owner}/{repo}/actions/workflows/{workflow}/runs"
RUN = "/repos/{owner}/{repo}/actions/runs/{run_id}"
JOBS = "/repos/{owner}/{repo}/actions/runs/{run_id}/jobs"
CANCEL = "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel"
DISPATCH = "/repos/{owner}/{repo}/actions/workflows/{workflow}/dispatches"
PER_PAGE = 100
#: How deep a listing goes (runs on one branch, newest first) before a run is looked up by id.
MAX_PAGES = 5


@dataclass(frozen=True)
class Target:
    """Which workflow runs: the repository, the workflow file (or id), the branch."""

    owner: str
    repo: str
    workflow: str
    branch: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.repo}"

    def segments(self) -> dict[str, object]:
        return {"owner": self.owner, "repo": self.repo}


def created_ms(run: Mapping[str, Any]) -> int | None:
    """A run's ``created_at`` as epoch ms (GitHub's clock), if it has one."""
    stamp = run.get("created_at")
    return parse_iso(stamp) if isinstance(stamp, str) else None


def run_id_of(run: Mapping[str, Any]) -> int | None:
    value = run.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class RunListing:
    """The workflow's ``workflow_dispatch`` runs on one branch, newest first, fetched lazily."""

    client: GitHubClient
    target: Target
    runs: list[dict[str, Any]] = field(default_factory=list)
    pages: int = 0
    exhausted: bool = False
    #: GitHub's clock at the first page (the ``Date`` header)
    server_time_ms: int | None = None
    #: a failure fetching a page: every later gate of this sweep hears it, nobody refetches
    error: GitHubError | None = None
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def fetch_next(self) -> bool:
        """Fetch one more page (synchronous); False when there is none to fetch."""
        if self.error is not None:
            raise self.error
        if self.exhausted or self.pages >= MAX_PAGES:
            return False
        params = {"event": "workflow_dispatch", "branch": self.target.branch,
                  "per_page": PER_PAGE, "page": self.pages + 1}  # fmt: skip
        try:
            answer = self.client.get(
                RUNS, params=params, etag=True, workflow=self.target.workflow,
                **self.target.segments(),
            )  # fmt: skip
        except GitHubError as exc:
            self.error = exc
            raise
        body = answer.body if isinstance(answer.body, dict) else {}
        items = body.get("workflow_runs")
        page = [r for r in items if isinstance(r, dict)] if isinstance(items, list) else []
        self.pages += 1
        if self.server_time_ms is None:
            self.server_time_ms = answer.server_time_ms
        self.runs.extend(page)
        if len(page) < PER_PAGE or answer.next_url is None:
            self.exhausted = True
        return True


async def walk(listing: RunListing, stop: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """The runs, newest first, fetching pages until ``stop(run)`` is true for a fetched run
    (the rest is older than anything wanted) or there are no more pages worth fetching."""
    async with listing.lock:
        if listing.pages == 0:
            await asyncio.to_thread(listing.fetch_next)
        while not any(stop(r) for r in listing.runs):
            if not await asyncio.to_thread(listing.fetch_next):
                break
        return list(listing.runs)


def listing_for(shared: dict[str, Any], client: GitHubClient, target: Target) -> RunListing:
    """This sweep's listing of ``target`` (one per base URL, repository, workflow, branch)."""
    key = f"zuke_gh.runs {client.base_url} {target.slug.lower()} {target.workflow} {target.branch}"
    found = shared.get(key)
    if not isinstance(found, RunListing):
        found = RunListing(client, target)
        shared[key] = found
    return found


def get_run(
    shared: dict[str, Any], client: GitHubClient, target: Target, run_id: int
) -> dict[str, Any]:
    """``GET .../actions/runs/{id}``, once per sweep per run (synchronous)."""
    key = f"zuke_gh.run {client.base_url} {target.slug.lower()} {run_id}"
    found = shared.get(key)
    if isinstance(found, GitHubError):
        raise found
    if isinstance(found, dict):
        return found
    try:
        answer = client.get(RUN, etag=True, run_id=run_id, **target.segments())
    except GitHubError as exc:
        shared[key] = exc
        raise
    body = answer.body if isinstance(answer.body, dict) else {}
    shared[key] = body
    return body


def list_jobs(client: GitHubClient, target: Target, run_id: int) -> list[dict[str, Any]]:
    """Every job of a run (paginated; synchronous)."""
    pages = client.paginate(
        JOBS, item_key="jobs", max_pages=MAX_PAGES, etag=True, run_id=run_id,
        owner=target.owner, repo=target.repo,
    )  # fmt: skip
    return [job for job in pages if isinstance(job, dict)]


def baseline(client: GitHubClient, target: Target) -> tuple[list[int], int | None]:
    """The ids of the newest page of dispatch runs on the branch, and GitHub's clock now."""
    params = {"event": "workflow_dispatch", "branch": target.branch, "per_page": PER_PAGE}
    answer = client.get(RUNS, params=params, workflow=target.workflow, **target.segments())
    body = answer.body if isinstance(answer.body, dict) else {}
    items = body.get("workflow_runs")
    ids = [i for r in items if isinstance(r, dict) and (i := run_id_of(r)) is not None] if (
        isinstance(items, list)
    ) else []  # fmt: skip
    return ids, answer.server_time_ms


def dispatch(
    client: GitHubClient, target: Target, ref: str, inputs: Mapping[str, Any], *, details: bool
) -> tuple[dict[str, Any], int | None]:
    """POST the dispatch (never resent after an ambiguous failure); its body and GitHub's clock."""
    body: dict[str, Any] = {"ref": ref, "inputs": dict(inputs)}
    if details:
        body["return_run_details"] = True
    answer = client.post(
        DISPATCH, json=body, idempotent=False, workflow=target.workflow, **target.segments()
    )
    found = answer.body if isinstance(answer.body, dict) else {}
    return found, answer.server_time_ms


def cancel(client: GitHubClient, target: Target, run_id: int) -> int:
    """Ask GitHub to cancel a run; the status (409: it had completed already)."""
    answer = client.post(CANCEL, expected=(409,), idempotent=True, run_id=run_id,
                         **target.segments())  # fmt: skip
    return answer.status
