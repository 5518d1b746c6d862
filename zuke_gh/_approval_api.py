"""The REST calls behind ``github_approval``, kept few (the thread's comments are read with
GraphQL: :mod:`zuke_gh._approval_reads`).

* **Who may approve is asked only for a command**, once per user per sweep
  (memoised in ``ctx.shared``): ``role_name`` from the permission endpoint
  (https://docs.github.com/en/rest/collaborators/collaborators#get-repository-permissions-for-a-user),
  team membership only when ``teams()`` is set
  (https://docs.github.com/en/rest/teams/members#get-team-membership-for-a-user).
  ``author_association`` is never used: it is a relationship, not a permission
  (a private org member shows as CONTRIBUTOR: actions/github-script#365).
* **Finding what zuke wrote by its marker** (after a crash or a lost answer)
  lists the repository's issues updated since just before the gate meant to
  open one, oldest first, or a thread's comments since then (in id order,
  oldest first: "List issue comments" orders them by ascending id), and takes
  the **oldest** that carries the marker *and was written by zuke's own
  identity* (:mod:`zuke_gh._identity`): anyone can open an issue or post a
  comment with a copied marker, and a copy is never older than what it copied.
  The search API is not used: its index lags and it has a rate limit of its own.

Everything here is synchronous (the client is); the gate calls it through
``asyncio.to_thread``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zuke_gh._approval_settings import effective_role
from zuke_gh._identity import identity, same_login
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubAccessError, GitHubError, GitHubPathError

ISSUES = "/repos/{owner}/{repo}/issues"
ISSUE = "/repos/{owner}/{repo}/issues/{number}"
COMMENTS = "/repos/{owner}/{repo}/issues/{number}/comments"
PERMISSION = "/repos/{owner}/{repo}/collaborators/{username}/permission"
MEMBERSHIP = "/orgs/{org}/teams/{team_slug}/memberships/{username}"
PER_PAGE = 100
#: How many pages a look for a marker reads at most (issues, or a thread's comments).
MAX_PAGES = 10
#: What a token needs to say who may decide (named when GitHub refuses; the client's hint is
#: generic).
ROLE_NEEDS = ("`metadata: read` on the repository, to read a commenter's role (a personal "
              "token needs push access there)")  # fmt: skip
TEAM_NEEDS = ("the organization's `members: read`, which teams() reads memberships with; a "
              "workflow's GITHUB_TOKEN cannot have it: use a GitHub App or a fine-grained token "
              "that has it, or name the approvers with users()")  # fmt: skip


@dataclass(frozen=True)
class Repo:
    owner: str
    name: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"

    def segments(self) -> dict[str, str]:
        return {"owner": self.owner, "repo": self.name}


def open_issue(client: GitHubClient, repo: Repo, title: str, body: str) -> dict[str, Any]:
    """POST a new issue (never resent after an ambiguous failure)."""
    answer = client.post(ISSUES, json={"title": title, "body": body}, idempotent=False,
                         **repo.segments())  # fmt: skip
    return answer.body if isinstance(answer.body, dict) else {}


def comment(client: GitHubClient, repo: Repo, number: int, body: str) -> dict[str, Any]:
    """POST a comment on an issue or pull request (never resent after an ambiguous failure)."""
    answer = client.post(COMMENTS, json={"body": body}, idempotent=False, number=number,
                         **repo.segments())  # fmt: skip
    return answer.body if isinstance(answer.body, dict) else {}


def close_issue(client: GitHubClient, repo: Repo, number: int, *, approved: bool) -> None:
    """Close the approval issue (``state_reason`` says how: completed, or not planned)."""
    reason = "completed" if approved else "not_planned"
    client.patch(ISSUE, json={"state": "closed", "state_reason": reason}, idempotent=True,
                 number=number, **repo.segments())  # fmt: skip


def find_issue(
    client: GitHubClient, repo: Repo, mark: str, since: str, author: str
) -> dict[str, Any] | None:
    """The oldest issue whose body carries ``mark`` and that ``author`` opened, among those
    updated since ``since``."""
    params = {"state": "all", "sort": "created", "direction": "asc", "since": since}
    for item in client.paginate(ISSUES, params=params, per_page=PER_PAGE, max_pages=MAX_PAGES,
                                owner=repo.owner, repo=repo.name):  # fmt: skip
        if isinstance(item, dict) and "pull_request" not in item and _ours(item, mark, author):
            return dict(item)
    return None


def find_comment(
    client: GitHubClient, repo: Repo, number: int, mark: str, since: str, author: str
) -> dict[str, Any] | None:
    """The oldest comment on the thread that carries ``mark`` and that ``author`` wrote, among
    those updated since ``since``."""
    for item in client.paginate(COMMENTS, params={"since": since}, per_page=PER_PAGE,
                                max_pages=MAX_PAGES, number=number,
                                owner=repo.owner, repo=repo.name):  # fmt: skip
        if isinstance(item, dict) and _ours(item, mark, author):
            return dict(item)
    return None


def find_own_comment(
    client: GitHubClient, repo: Repo, number: int, mark: str, since: str
) -> dict[str, Any] | None:
    """The oldest comment carrying ``mark`` that zuke's own identity wrote on the thread."""
    return find_comment(client, repo, number, mark, since, identity(client))


def _ours(item: Mapping[str, Any], mark: str, author: str) -> bool:
    body, user = item.get("body"), item.get("user")
    login = user.get("login") if isinstance(user, Mapping) else None
    return isinstance(body, str) and mark in body and same_login(login if isinstance(
        login, str) else None, author)  # fmt: skip


def role_of(shared: dict[str, Any], client: GitHubClient, repo: Repo, login: str) -> str:
    """The user's role on the repository now (``"none"``: no access, or no such user);
    once per sweep per user."""
    key = f"zuke_gh.role {client.base_url} {repo.slug.lower()} {login.lower()}"
    found = shared.get(key)
    if isinstance(found, str):
        return found
    try:
        answer = client.get(PERMISSION, expected=(404,), username=login, **repo.segments())
    except GitHubPathError:  # a login no path can hold is no collaborator
        return "none"
    body = answer.body if isinstance(answer.body, Mapping) else {}
    role = "none" if answer.status == 404 else effective_role(body)
    shared[key] = role
    return role


def in_team(
    shared: dict[str, Any], client: GitHubClient, repo: Repo, org: str, slug: str, login: str
) -> bool:
    """Whether the user is an active member of ``org/slug``; once per sweep per user and team.
    A 404 is "not a member" (GitHub answers it for a team the token cannot see, too)."""
    key = f"zuke_gh.team {client.base_url} {org} {slug} {login.lower()}"
    found = shared.get(key)
    if isinstance(found, bool):
        return found
    try:
        answer = client.get(MEMBERSHIP, expected=(404,), org=org, team_slug=slug, username=login)
    except GitHubPathError:
        return False
    body = answer.body if isinstance(answer.body, Mapping) else {}
    member = answer.status == 200 and body.get("state") == "active"  # "pending": not yet
    shared[key] = member
    return member


def not_acted_on(error: GitHubError) -> bool:
    """GitHub certainly did nothing with the call: never sent, or refused by a rate limit."""
    return error.unsent or error.retry_at_ms is not None or error.status == 429


class ApprovalAccessError(GitHubAccessError):
    """A :class:`GitHubAccessError` the approval gate said in its own words (which credential,
    which permission): raised on as it is."""


#: What a token needs to read an approval thread.
READ_NEEDS = "`issues: read` (`pull-requests: read` for a pull request) and `metadata: read`"


def needs(error: GitHubError) -> str:
    """What the call GitHub refused needs (by its path)."""
    path = error.path or ""
    if "/memberships/" in path:
        return TEAM_NEEDS
    return ROLE_NEEDS if "/collaborators/" in path else READ_NEEDS


def access_error(client: GitHubClient, where: str, error: GitHubError) -> ApprovalAccessError:
    """``error`` (a 401, a 403 that is no rate limit, a repository GitHub does not show) as
    the one line a sweep goes red with: which credential, and what to check."""
    if isinstance(error, ApprovalAccessError):
        return error
    who, need = client.token_name, needs(error)
    said = f"GitHub answered {error.status} to {error.method} {error.path}"
    said += f": {error.detail.rstrip('.')}" if error.detail else ""
    if error.status == 401:
        todo = f"the token is invalid, expired or revoked: check {who}"
    elif error.status == 404:
        todo = (f"the repository does not exist, or {who} cannot see it: check its name and "
                f"that {who} has {need}")  # fmt: skip
    else:
        todo = f"{who} lacks a permission: give it {need}"
    return ApprovalAccessError(
        f"{where}: {said}; {todo}.",
        status=error.status, method=error.method, path=error.path, detail=error.detail,
    )  # fmt: skip
