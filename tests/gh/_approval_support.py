"""Helpers for the ``github_approval`` unit tests: a small GitHub for one repository on a
respx router (issues, comments with ``since`` and ETags, permissions, team memberships), and
a gate's context without an engine."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx
import respx

from tests.gh.conftest import START_MS
from zuke._clock import parse_iso
from zuke._engine.context import merge_patch
from zuke._waits import GateState, WaitContext, WaitTrigger
from zuke_gh import GitHubClient, github_approval
from zuke_gh._approval_settings import ApprovalSettings
from zuke_gh.approval import gh_time

REPO = "/repos/acme/app"
SHA = "0123456789abcdef0123456789abcdef01234567"


class Killed(BaseException):
    """A process killed mid-call (not an Exception: nothing in the gate may catch it)."""


class Hub:
    """acme/app's issues and comments, as GitHub answers for them (the fields the gate reads).

    ``roles`` maps a login to its ``role_name`` (a custom role is ``(name, base)``); ``teams``
    maps ``org/slug`` to ``{login: state}``. ``calls`` lists ``METHOD path`` of each request.
    """

    def __init__(self, router: respx.Router) -> None:
        self.now = START_MS
        self.issues: dict[int, dict[str, Any]] = {}
        self.comments: list[dict[str, Any]] = []
        self.roles: dict[str, Any] = {}
        self.teams: dict[str, dict[str, str]] = {}
        self.calls: list[str] = []
        #: how many reads of comments GitHub answered 304 (free: not counted by the rate limit)
        self.not_modified = 0
        self.next_issue = 1
        self.next_comment = 100
        #: a status to answer the next POST of an issue or a comment with (then cleared)
        self.fail_post: int | BaseException | None = None
        #: the process dies right after GitHub made the next issue or comment (its answer lost)
        self.kill_after_post = False
        r = router
        r.post(f"{REPO}/issues").mock(side_effect=self._open)
        r.get(f"{REPO}/issues").mock(side_effect=self._list_issues)
        r.route(method="PATCH", path__regex=rf"^{REPO}/issues/\d+$").mock(side_effect=self._patch)
        r.get(path__regex=rf"^{REPO}/issues/\d+/comments$").mock(side_effect=self._comments)
        r.post(path__regex=rf"^{REPO}/issues/\d+/comments$").mock(side_effect=self._comment)
        r.get(path__regex=rf"^{REPO}/collaborators/[^/]+/permission$").mock(
            side_effect=self._permission
        )
        r.get(path__regex=r"^/orgs/[^/]+/teams/[^/]+/memberships/[^/]+$").mock(
            side_effect=self._membership
        )

    # -- what people do on GitHub ------------------------------------------------------------

    def tick(self, ms: int = 1000) -> str:
        self.now += ms
        return gh_time(self.now)

    def add_issue(self, number: int, body: str = "an existing issue") -> dict[str, Any]:
        at = self.tick()
        issue = {"number": number, "title": "t", "body": body, "state": "open",
                 "created_at": at, "updated_at": at,
                 "html_url": f"https://github.com/acme/app/issues/{number}"}  # fmt: skip
        self.issues[number] = issue
        self.next_issue = max(self.next_issue, number + 1)
        return issue

    def say(self, number: int, login: str, body: str, **extra: Any) -> dict[str, Any]:
        at = self.tick()
        self.next_comment += 1
        made = {"id": self.next_comment, "body": body, "user": {"login": login, "type": "User"},
                "created_at": at, "updated_at": at, "issue": number,
                "html_url": f"https://github.com/acme/app/issues/{number}#issuecomment-"
                            f"{self.next_comment}", **extra}  # fmt: skip
        self.comments.append(made)
        return made

    def edit(self, comment_id: int, body: str) -> None:
        found = next(c for c in self.comments if c["id"] == comment_id)
        found.update(body=body, updated_at=self.tick())

    def on(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments if c["issue"] == number]

    def count(self, call: str) -> int:
        return sum(1 for c in self.calls if c == call)

    # -- the routes --------------------------------------------------------------------------

    def _record(self, request: httpx.Request) -> None:
        self.calls.append(f"{request.method} {request.url.path}")

    def _failing(self) -> httpx.Response | None:
        failure, self.fail_post = self.fail_post, None
        if isinstance(failure, BaseException):
            raise failure
        if isinstance(failure, int):
            return httpx.Response(failure, json={"message": f"failed with {failure}"})
        return None

    def _maybe_killed(self) -> None:
        if self.kill_after_post:
            self.kill_after_post = False
            raise Killed("the process was killed")

    def _open(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        failed = self._failing()
        if failed is not None:
            return failed
        sent = json.loads(request.content)
        issue = self.add_issue(self.next_issue, sent["body"])
        issue["title"] = sent["title"]
        self._maybe_killed()
        return httpx.Response(201, json=issue)

    def _list_issues(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        since = parse_iso(request.url.params.get("since", "")) or 0
        items = [i for i in self.issues.values() if (parse_iso(i["updated_at"]) or 0) >= since]
        items.sort(key=lambda i: i["number"], reverse=True)
        return httpx.Response(200, json=items)

    def _patch(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        number = int(request.url.path.rsplit("/", 1)[1])
        self.issues[number].update(json.loads(request.content))
        return httpx.Response(200, json=self.issues[number])

    def _comments(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        number = int(request.url.path.split("/")[-2])
        since = parse_iso(request.url.params.get("since", "")) or 0
        # `since`: "only comments updated at or after this time" (issue comments REST docs)
        items = [c for c in self.on(number) if (parse_iso(c["updated_at"]) or 0) >= since]
        items.sort(key=lambda c: c["id"])
        body = [{k: v for k, v in c.items() if k != "issue"} for c in items]
        tag = '"' + hashlib.sha256(json.dumps([str(request.url), body]).encode()).hexdigest() + '"'
        if request.headers.get("if-none-match") == tag:
            self.not_modified += 1
            return httpx.Response(304, headers={"ETag": tag})
        return httpx.Response(200, json=body, headers={"ETag": tag})

    def _comment(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        failed = self._failing()
        if failed is not None:
            return failed
        number = int(request.url.path.split("/")[-2])
        made = self.say(number, "github-actions[bot]", json.loads(request.content)["body"])
        self._maybe_killed()
        return httpx.Response(201, json={k: v for k, v in made.items() if k != "issue"})

    def _permission(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        login = request.url.path.split("/")[-2]
        role = self.roles.get(login)
        if role is None:
            role = "read"  # anyone may read a public repository
        name, base = role if isinstance(role, tuple) else (role, role)
        legacy = {"maintain": "write", "triage": "read"}.get(base, base)
        return httpx.Response(200, json={"permission": legacy, "role_name": name,
                                         "user": {"login": login}})  # fmt: skip

    def _membership(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        parts = request.url.path.split("/")
        org, slug, login = parts[2], parts[4], parts[6]
        state = self.teams.get(f"{org}/{slug}", {}).get(login)
        if state is None:
            return httpx.Response(404, json={"message": "Not Found"})
        return httpx.Response(200, json={"state": state, "role": "member"})


def gate(
    client: GitHubClient | Callable[[], GitHubClient],
    configure: Callable[[ApprovalSettings], Any] | None = None,
) -> WaitTrigger:
    """``github_approval`` on acme/app with ``client`` injected."""
    factory = client if callable(client) and not isinstance(client, GitHubClient) else (
        lambda: client)  # fmt: skip

    def settings(a: ApprovalSettings) -> Any:
        a.repo("acme/app").client(factory)
        return configure(a) if configure else a

    return github_approval(settings)


class Probe:
    """One gate's durable state, checked the way the engine and the sweep check it.

    ``persist()`` copies the state to ``durable``; :meth:`crash` drops what was not."""

    def __init__(self, *, actor: str = "starter", params: dict[str, Any] | None = None) -> None:
        self.run_id = "run-1"
        self.target = "qa"
        self.actor = actor
        self.params = params if params is not None else {"env": "prod"}
        self.meta: dict[str, Any] = {}
        self.durable: dict[str, Any] = {}
        self.events: list[str] = []

    def context(self, now_ms: int = START_MS) -> WaitContext:
        async def persist() -> None:
            self.events.append("persist")
            self.durable = json.loads(json.dumps(self.meta))

        def write(patch: Any) -> None:
            self.meta = merge_patch(self.meta, patch)

        return WaitContext(
            run_id=self.run_id, target=self.target, params=self.params, signals={},
            state=GateState(lambda: json.loads(json.dumps(self.meta)), write), now_ms=now_ms,
            deadline_ms=START_MS + 72 * 3_600_000, persist=persist, shared={}, actor=self.actor,
        )  # fmt: skip

    def check(self, trigger: WaitTrigger, now_ms: int = START_MS) -> Any:
        """One check; what it wrote lands (the end of a check writes the gate's state)."""
        answer = asyncio.run(_ask(trigger, self.context(now_ms)))
        self.durable = json.loads(json.dumps(self.meta))
        return answer

    def crash(self) -> None:
        """The process died: only what was persisted is left."""
        self.meta = json.loads(json.dumps(self.durable))


async def _ask(trigger: WaitTrigger, ctx: WaitContext) -> Any:
    return await trigger.check(ctx)  # type: ignore[misc]
