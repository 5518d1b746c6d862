"""The release dashboard's issue on GitHub: found again, opened once, edited, pinned.

* **Found again only among zuke's own.** Anyone may open an issue and paste the dashboard's
  marker into it, and anyone with triage access may label it ``zuke``. So the dashboard is
  the **oldest** issue whose body starts with the marker (an approval issue zuke opened may
  quote it in a parameter, never first) *and* that zuke's own identity opened
  (:mod:`zuke_gh._identity`); a copy by anyone else is never adopted, and a copy is never
  older than what it copied. The issues labelled ``zuke`` are read first (one request once
  the dashboard exists: "List repository issues" with ``labels``, ``state=all``, oldest
  first, docs.github.com REST issues); only when none of them is it (the first sweep, or a
  maintainer took the label off) are the repository's issues read, :data:`MAX_PAGES` pages
  at most. The search API is not used: its index lags (a dashboard just opened would not be
  found, and a second one opened).
* **Opened once.** The ``POST`` is never resent after an ambiguous failure: a lost answer is
  found by the next sweep's look, before it opens another.
* **Pinned when the token may** (GraphQL ``pinIssue``, right after opening it): a refusal — a
  token without the right, three issues pinned already — is said, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zuke_gh._approval_api import ISSUE, ISSUES, Repo
from zuke_gh._dashboard_view import LABEL, TITLE, marker
from zuke_gh._identity import same_login
from zuke_gh.client import GitHubClient

PER_PAGE = 100
#: pages of the repository's issues read at most when no labelled issue is the dashboard
MAX_PAGES = 10
PIN = "mutation($id: ID!) { pinIssue(input: {issueId: $id}) { issue { number isPinned } } }"


def ours(item: object, mark: str, author: str) -> bool:
    """An issue (not a pull request) whose body *starts* with ``mark``, opened by ``author``:
    an approval issue zuke opened may quote the marker in a parameter, never at its start."""
    if not isinstance(item, Mapping) or "pull_request" in item:
        return False
    body, user = item.get("body"), item.get("user")
    login = user.get("login") if isinstance(user, Mapping) else None
    return (isinstance(body, str) and body.startswith(mark)
            and same_login(login if isinstance(login, str) else None, author))  # fmt: skip


def find(client: GitHubClient, repo: Repo, author: str) -> dict[str, Any] | None:
    """The dashboard: the oldest issue with the marker that ``author`` opened, or None."""
    mark = marker(repo.slug)
    oldest = {"state": "all", "sort": "created", "direction": "asc"}
    for params, pages in (({**oldest, "labels": LABEL}, MAX_PAGES), (oldest, MAX_PAGES)):
        for item in client.paginate(ISSUES, params=params, per_page=PER_PAGE, max_pages=pages,
                                    etag=True, owner=repo.owner, repo=repo.name):  # fmt: skip
            if ours(item, mark, author):
                return dict(item)
    return None


def open_issue(client: GitHubClient, repo: Repo, body: str) -> dict[str, Any]:
    """POST the dashboard (never resent after an ambiguous failure)."""
    answer = client.post(ISSUES, json={"title": TITLE, "body": body, "labels": [LABEL]},
                         idempotent=False, **repo.segments())  # fmt: skip
    return dict(answer.body) if isinstance(answer.body, Mapping) else {}


def labels_of(issue: Mapping[str, Any]) -> list[str]:
    found = issue.get("labels")
    names = [label.get("name") if isinstance(label, Mapping) else label
             for label in found] if isinstance(found, list) else []  # fmt: skip
    return [n for n in names if isinstance(n, str)]


def needs_edit(issue: Mapping[str, Any]) -> dict[str, Any]:
    """What besides the body puts the dashboard right: open again, labelled ``zuke`` again
    (the maintainers' own labels kept: ``labels`` replaces them all)."""
    patch: dict[str, Any] = {}
    if issue.get("state") != "open":
        patch["state"] = "open"
    names = labels_of(issue)
    if not any(n.lower() == LABEL for n in names):
        patch["labels"] = [*names, LABEL]
    return patch


def edit(client: GitHubClient, repo: Repo, number: int, patch: Mapping[str, Any]) -> None:
    """PATCH the dashboard (the same patch twice changes nothing: idempotent)."""
    client.patch(ISSUE, json=dict(patch), idempotent=True, number=number, **repo.segments())


def pin(client: GitHubClient, node_id: str) -> str | None:
    """Pin the issue; None when pinned, else what GitHub said (a refusal is no error)."""
    answer = client.graphql(PIN, {"id": node_id})
    data = answer.get("data")
    payload = data.get("pinIssue") if isinstance(data, Mapping) else None
    issue = payload.get("issue") if isinstance(payload, Mapping) else None
    if isinstance(issue, Mapping) and issue.get("isPinned") is True:
        return None
    errors = answer.get("errors")
    said = [e.get("message") for e in errors if isinstance(e, Mapping)] if isinstance(
        errors, list) else []  # fmt: skip
    return "; ".join(str(s) for s in said if s) or "GitHub did not pin it"
