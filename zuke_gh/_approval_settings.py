"""The settings of a ``github_approval`` gate, and its decision: ``Approval``.

Settings are checked when the build loads (the gate's ``waits_for`` runs
then): a repository that is not ``owner/name``, a role GitHub has no name for,
a count below one, a login or team GitHub would refuse, or two threads named
at once is a :class:`~zuke.BuildDefinitionError` naming it, before any issue
is opened. The repository may be left out: it is then ``GITHUB_REPOSITORY``
as the process that opens the issue sees it (recorded in the gate's state, so
every later check, in any process, asks the same repository).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from zuke import BuildDefinitionError
from zuke_gh._paths import repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

ClientFactory = Callable[[], GitHubClient]
Thread = Literal["issue", "pull_request"]
#: GitHub's repository roles, least to most (``role_name`` of the permission endpoint).
ROLES = ("read", "triage", "write", "maintain", "admin")
#: What ``role()`` accepts: approving a release needs at least push access.
GATE_ROLES = ("write", "maintain", "admin")
#: A login: alphanumerics and single inner hyphens, at most 39 (an App's ends in ``[bot]``).
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}(?:\[bot\])?")
_TEAM_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class Approver:
    """Who decided: the login, their role on the repository then, the comment and its time."""

    login: str
    role: str
    url: str
    at: str


@dataclass(frozen=True)
class Approval:
    """A gate's decision: approved by ``approvers``, or denied by ``denied_by`` for ``reason``."""

    approved: bool
    approvers: list[Approver] = field(default_factory=list)
    denied_by: Approver | None = None
    reason: str | None = None


def approver_of(raw: Any) -> Approver | None:
    """An :class:`Approver` from its stored form (malformed fields read as empty)."""
    if not isinstance(raw, Mapping):
        return None

    def text(key: str) -> str:
        value = raw.get(key)
        return value if isinstance(value, str) else ""

    return Approver(text("login"), text("role"), text("url"), text("at"))


def read_approval(state: Any) -> Approval | None:
    """The gate's decision from ``ctx.state_of("<gate>")`` (or its ``.get()`` mapping);
    ``None`` before the gate decided."""
    data = state.get() if callable(getattr(state, "get", None)) and not isinstance(
        state, Mapping
    ) else state  # fmt: skip
    raw = data.get("decision") if isinstance(data, Mapping) else None
    if not isinstance(raw, Mapping):
        return None
    rows = raw.get("approvers")
    approvers = [a for r in (rows if isinstance(rows, list) else []) if (a := approver_of(r))]
    reason = raw.get("reason")
    return Approval(
        approved=raw.get("approved") is True,
        approvers=approvers,
        denied_by=approver_of(raw.get("deniedBy")),
        reason=reason if isinstance(reason, str) else None,
    )


@dataclass(frozen=True)
class ApprovalSpec:
    """The frozen settings of one ``github_approval`` gate."""

    repo: tuple[str, str] | None
    role: str
    approvals: int
    no_self_approval: bool
    #: allowed logins, lower-cased (GitHub logins are case-insensitive); empty: anyone
    users: frozenset[str]
    #: allowed teams as (org, slug); empty: anyone
    teams: tuple[tuple[str, str], ...]
    thread: int | None
    thread_kind: Thread | None
    client: ClientFactory | None = field(default=None, compare=False)


class ApprovalSettings:
    """What ``github_approval(configure)`` hands ``configure``; every setting is checked here,
    at build load (a bad one is a :class:`~zuke.BuildDefinitionError` naming it)."""

    def __init__(self) -> None:
        self._repo: tuple[str, str] | None = None
        self._role = "write"
        self._approvals = 1
        self._no_self = False
        self._users: set[str] = set()
        self._teams: list[tuple[str, str]] = []
        self._thread: tuple[Thread, int] | None = None
        self._client: ClientFactory | None = None

    def repo(self, slug: str) -> ApprovalSettings:
        """The repository the approval issue lives in (default ``GITHUB_REPOSITORY``)."""
        try:
            self._repo = repo_slug(slug)
        except GitHubError as exc:
            raise BuildDefinitionError(f"github_approval: {exc}") from None
        return self

    def role(self, name: str) -> ApprovalSettings:
        """The least role an approver needs: ``"write"`` (default), ``"maintain"``, ``"admin"``."""
        if name not in GATE_ROLES:
            raise BuildDefinitionError(
                f'github_approval: role() takes "write", "maintain" or "admin", got {name!r}'
            )
        self._role = name
        return self

    def approvals(self, count: int) -> ApprovalSettings:
        """How many distinct approvers the gate needs (default 1)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise BuildDefinitionError(
                f"github_approval: approvals() takes a whole number of at least 1, got {count!r}"
            )
        self._approvals = count
        return self

    def no_self_approval(self, enabled: bool = True) -> ApprovalSettings:
        """The actor who started the run cannot approve it (they may still ``/deny``)."""
        self._no_self = bool(enabled)
        return self

    def users(self, *logins: str) -> ApprovalSettings:
        """Only these logins may decide (with the role); with ``teams()``, either will do."""
        for login in logins:
            name = login.removeprefix("@") if isinstance(login, str) else login
            if not isinstance(name, str) or not _LOGIN.fullmatch(name):
                raise BuildDefinitionError(
                    f"github_approval: users() takes GitHub logins, got {login!r}"
                )
            self._users.add(name.lower())
        return self

    def teams(self, *slugs: str) -> ApprovalSettings:
        """Only members of these teams (``"org/team-slug"``) may decide (with the role)."""
        for slug in slugs:
            org, _, team = slug.removeprefix("@").partition("/") if isinstance(slug, str) else (
                "", "", "")  # fmt: skip
            if not _LOGIN.fullmatch(org) or not _TEAM_SLUG.fullmatch(team):
                raise BuildDefinitionError(
                    f'github_approval: teams() takes "org/team-slug", got {slug!r}'
                )
            if (org.lower(), team.lower()) not in self._teams:
                self._teams.append((org.lower(), team.lower()))
        return self

    def on_issue(self, number: int) -> ApprovalSettings:
        """Ask on this existing issue (a comment) instead of opening one."""
        return self._on("issue", number)

    def on_pull_request(self, number: int) -> ApprovalSettings:
        """Ask on this pull request's conversation (a comment) instead of opening an issue."""
        return self._on("pull_request", number)

    def _on(self, kind: Thread, number: int) -> ApprovalSettings:
        what = "on_issue" if kind == "issue" else "on_pull_request"
        if isinstance(number, bool) or not isinstance(number, int) or number < 1:
            raise BuildDefinitionError(
                f"github_approval: {what}() takes an issue or pull request number, got {number!r}"
            )
        if self._thread is not None and self._thread != (kind, number):
            raise BuildDefinitionError(
                "github_approval: on_issue() and on_pull_request() name one thread: set only one"
            )
        self._thread = (kind, number)
        return self

    def client(self, factory: ClientFactory) -> ApprovalSettings:
        """Make the GitHub client with ``factory`` (a test seam; default: from the environment)."""
        if not callable(factory):
            raise BuildDefinitionError(f"github_approval: client() takes a callable returning a "
                                       f"GitHubClient, got {factory!r}")  # fmt: skip
        self._client = factory
        return self

    def freeze(self) -> ApprovalSpec:
        kind, number = self._thread if self._thread is not None else (None, None)
        return ApprovalSpec(
            repo=self._repo, role=self._role, approvals=self._approvals,
            no_self_approval=self._no_self, users=frozenset(self._users),
            teams=tuple(self._teams), thread=number, thread_kind=kind, client=self._client,
        )  # fmt: skip


#: ``user.permissions`` keys, highest first, and the role each means.
_GRANTS = (("admin", "admin"), ("maintain", "maintain"), ("push", "write"), ("triage", "triage"),
           ("pull", "read"))  # fmt: skip


def effective_role(body: Mapping[str, Any]) -> str:
    """The role a permission answer grants: ``role_name`` when it is one of GitHub's roles;
    for a custom role, the highest of ``user.permissions`` (GitHub's exact grant: a custom role
    built on maintain has ``maintain: true``), else the legacy ``permission`` — which rounds
    maintain down to ``write`` and triage to ``read`` (OpenAPI
    ``repository-collaborator-permission``), so it is only the last resort; ``"none"`` when
    nothing says."""
    name = body.get("role_name")
    if isinstance(name, str) and name in ROLES:
        return name
    user = body.get("user")
    grants = user.get("permissions") if isinstance(user, Mapping) else None
    if isinstance(grants, Mapping):
        for key, role in _GRANTS:
            if grants.get(key) is True:
                return role
    base = body.get("permission")
    legacy = {"push": "write", "pull": "read"}  # the older names of the base permissions
    if isinstance(base, str):
        base = legacy.get(base, base)
        if base in ROLES:
            return base
    return "none"


def at_least(role: str, least: str) -> bool:
    """Whether ``role`` is ``least`` or above it (an unknown role never is)."""
    return role in ROLES and ROLES.index(role) >= ROLES.index(least)
