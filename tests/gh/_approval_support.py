"""Helpers for the ``github_approval`` unit tests: a small GitHub for one repository on a
respx router (issues and comments by anyone, GraphQL comment pages with cursors and the
batched look, who the token is, permissions, team memberships), and a gate's context without
an engine."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import httpx
import respx

from tests.gh.conftest import START_MS
from zuke._clock import parse_iso
from zuke._engine.context import merge_patch
from zuke._waits import ActorSource, GateState, WaitContext, WaitTrigger
from zuke_gh import GitHubClient, github_approval
from zuke_gh._approval_settings import ApprovalSettings
from zuke_gh.approval import gh_time

REPO = "/repos/acme/app"
SHA = "0123456789abcdef0123456789abcdef01234567"
#: who the gate's token writes as (an installation token: GET /user is refused)
BOT = "github-actions[bot]"
GRAPHQL = "POST /graphql"
_ALIAS = re.compile(
    r"(r\d+): repository\(owner: \$o\d+, name: \$n\d+\)|(g\d+): (issue|pullRequest)"
    r"\(number: \$(i\d+)\) \{ comments\(first: 1, after: \$(c\d+)\)"
)


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
        #: the whole URL of each request (its query included)
        self.urls: list[str] = []
        #: the body of each GraphQL request (the batched look, the thread reads)
        self.queries: list[dict[str, Any]] = []
        #: the gate's token: an installation token (its bot) unless a user is named
        self.token_user: str | None = None
        #: a status to answer every GraphQL request with (401, 403 ...), or None
        self.graphql_status: int | None = None
        #: cursors GitHub no longer takes (a GraphQL error for them)
        self.stale_cursors: set[str] = set()
        #: paths GitHub refuses with 403 "Resource not accessible by integration"
        self.refused: set[str] = set()
        #: the rate-limit headers every answer carries (x-ratelimit-*), when set
        self.rate: dict[str, str] = {}
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
        r.post("/graphql").mock(side_effect=self._graphql)
        r.get("/user").mock(side_effect=self._user)
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

    def add_issue(
        self, number: int, body: str = "an existing issue", login: str = "someone"
    ) -> dict[str, Any]:
        at = self.tick()
        issue = {"number": number, "title": "t", "body": body, "state": "open",
                 "created_at": at, "updated_at": at, "user": {"login": login},
                 "html_url": f"https://github.com/acme/app/issues/{number}"}  # fmt: skip
        self.issues[number] = issue
        self.next_issue = max(self.next_issue, number + 1)
        return issue

    def say(self, number: int, login: str, body: str, **extra: Any) -> dict[str, Any]:
        at = self.tick()
        self.next_comment += 1
        kind = "Bot" if login.endswith("[bot]") else "User"
        made = {"id": self.next_comment, "body": body, "user": {"login": login, "type": kind},
                "created_at": at, "updated_at": at, "issue": number,
                "html_url": f"https://github.com/acme/app/issues/{number}#issuecomment-"
                            f"{self.next_comment}", **extra}  # fmt: skip
        self.comments.append(made)
        return made

    def edit(self, comment_id: int, body: str) -> None:
        found = next(c for c in self.comments if c["id"] == comment_id)
        found.update(body=body, updated_at=self.tick(), edited_at=gh_time(self.now))

    def delete(self, comment_id: int) -> None:
        self.comments = [c for c in self.comments if c["id"] != comment_id]

    def on(self, number: int) -> list[dict[str, Any]]:
        return [c for c in self.comments if c["issue"] == number]

    def count(self, call: str) -> int:
        return sum(1 for c in self.calls if c == call)

    # -- the routes --------------------------------------------------------------------------

    def _record(self, request: httpx.Request) -> None:
        self.calls.append(f"{request.method} {request.url.path}")
        self.urls.append(str(request.url))

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
        issue = self.add_issue(self.next_issue, sent["body"], self.token_user or BOT)
        issue["title"] = sent["title"]
        self._maybe_killed()
        return httpx.Response(201, json=issue)

    def _list_issues(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        since = parse_iso(request.url.params.get("since", "")) or 0
        items = [i for i in self.issues.values() if (parse_iso(i["updated_at"]) or 0) >= since]
        items.sort(key=lambda i: i["number"], reverse=request.url.params.get("direction") != "asc")
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
        body = [{k: v for k, v in c.items() if k not in ("issue", "edited_at")} for c in items]
        return httpx.Response(200, json=body, headers=self.rate)

    def _user(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        if self.token_user is None:  # an installation token (GITHUB_TOKEN, an App's)
            return httpx.Response(403, json={"message": "Resource not accessible by integration"})
        return httpx.Response(200, json={"login": self.token_user, "type": "User"})

    def _graphql(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        sent = json.loads(request.content)
        self.queries.append(sent)
        headers = {"x-ratelimit-resource": "graphql", **self.rate}
        if self.graphql_status is not None:
            return httpx.Response(self.graphql_status, json={"message": "Bad credentials"})
        query, variables = sent["query"], sent.get("variables") or {}
        if "viewer" in query:  # GraphQL spells a bot without "[bot]"
            login = self.token_user or BOT.removesuffix("[bot]")
            kind = "User" if self.token_user else "Bot"
            viewer = {"login": login, "__typename": kind}
            return httpx.Response(200, json={"data": {"viewer": viewer}})
        if "thread:" in query:
            return httpx.Response(200, json=self._thread(variables), headers=headers)
        data: dict[str, Any] = {}
        errors: list[dict[str, Any]] = []
        repo = ""
        for m in _ALIAS.finditer(query):
            if m.group(1):
                repo = m.group(1)
                data[repo] = {}
                continue
            number, after = int(variables[m.group(4)]), variables.get(m.group(5))
            if number not in self.issues:
                data[repo][m.group(2)] = None
                errors.append({"type": "NOT_FOUND", "path": [repo, m.group(2)],
                               "message": "Could not resolve to an Issue."})  # fmt: skip
                continue
            nodes = [{"fullDatabaseId": str(c["id"])} for c in self._after(number, after)][:1]
            data[repo][m.group(2)] = {"comments": {"nodes": nodes}}
        answer: dict[str, Any] = {"data": data, **({"errors": errors} if errors else {})}
        return httpx.Response(200, json=answer, headers=headers)

    def _after(self, number: int, cursor: str | None) -> list[dict[str, Any]]:
        floor = int(cursor.removeprefix("c:")) if cursor else 0
        return sorted((c for c in self.on(number) if c["id"] > floor), key=lambda c: c["id"])

    def _thread(self, variables: dict[str, Any]) -> dict[str, Any]:
        after = variables.get("after")
        if after in self.stale_cursors:
            return {"data": {"repository": {"thread": None}},
                    "errors": [{"message": f"`{after}` does not appear to be a valid cursor.",
                                "path": ["repository", "thread", "comments"]}]}  # fmt: skip
        number = int(variables["number"])
        if number not in self.issues:
            return {"data": {"repository": {"thread": None}},
                    "errors": [{"type": "NOT_FOUND", "path": ["repository", "thread"],
                                "message": "Could not resolve to an Issue."}]}  # fmt: skip
        page = self._after(number, after)[:100]
        nodes = [{"fullDatabaseId": str(c["id"]),
                  "author": {"login": c["user"]["login"].removesuffix("[bot]"),
                             "__typename": c["user"]["type"]},
                  "body": c["body"], "createdAt": c["created_at"],
                  "updatedAt": c["updated_at"], "lastEditedAt": c.get("edited_at")}
                 for c in page]  # fmt: skip
        end = f"c:{page[-1]['id']}" if page else after
        more = len(self._after(number, after)) > 100
        return {
            "data": {
                "repository": {
                    "thread": {
                        "comments": {
                            "pageInfo": {"hasNextPage": more, "endCursor": end},
                            "nodes": nodes,
                        }
                    }
                }
            }
        }

    def _comment(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        failed = self._failing()
        if failed is not None:
            return failed
        number = int(request.url.path.split("/")[-2])
        made = self.say(number, self.token_user or BOT, json.loads(request.content)["body"])
        self._maybe_killed()
        return httpx.Response(201, json={k: v for k, v in made.items() if k != "issue"})

    def _refusal(self, request: httpx.Request) -> httpx.Response | None:
        if request.url.path not in self.refused:
            return None
        return httpx.Response(403, json={"message": "Resource not accessible by integration"})

    def _permission(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        if (refusal := self._refusal(request)) is not None:
            return refusal
        login = request.url.path.split("/")[-2]
        role = self.roles.get(login)
        if role is None:
            role = "read"  # anyone may read a public repository
        name, base = role if isinstance(role, tuple) else (role, role)
        legacy = {"maintain": "write", "triage": "read"}.get(base, base)
        order = ["pull", "triage", "push", "maintain", "admin"]
        rank = ["read", "triage", "write", "maintain", "admin"].index(base)
        grants = {key: n <= rank for n, key in enumerate(order)}
        user = {"login": login, "permissions": grants}
        return httpx.Response(200, json={"permission": legacy, "role_name": name, "user": user})

    def _membership(self, request: httpx.Request) -> httpx.Response:
        self._record(request)
        if (refusal := self._refusal(request)) is not None:
            return refusal
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

    def __init__(
        self, *, actor: str | None = "starter", params: dict[str, Any] | None = None,
        source: ActorSource = "github", redact: Callable[[str], str] | None = None,
    ) -> None:  # fmt: skip
        self.run_id = "run-1"
        self.target = "qa"
        self.actor = actor
        self.source: ActorSource = source
        self.redact = redact
        self.params = params if params is not None else {"env": "prod"}
        self.meta: dict[str, Any] = {}
        self.durable: dict[str, Any] = {}
        self.events: list[str] = []

    def context(self, now_ms: int = START_MS, shared: dict[str, Any] | None = None) -> WaitContext:
        async def persist() -> None:
            self.events.append("persist")
            self.durable = json.loads(json.dumps(self.meta))

        def write(patch: Any) -> None:
            self.meta = merge_patch(self.meta, patch)

        return WaitContext(
            run_id=self.run_id, target=self.target, params=self.params, signals={},
            state=GateState(lambda: json.loads(json.dumps(self.meta)), write), now_ms=now_ms,
            deadline_ms=START_MS + 72 * 3_600_000, persist=persist,
            shared={} if shared is None else shared, actor=self.actor, actor_source=self.source,
            redact=self.redact,
        )  # fmt: skip

    def check(
        self, trigger: WaitTrigger, now_ms: int = START_MS, shared: dict[str, Any] | None = None
    ) -> Any:
        """One check; what it wrote lands (the end of a check writes the gate's state)."""
        answer = asyncio.run(_ask(trigger, self.context(now_ms, shared)))
        self.durable = json.loads(json.dumps(self.meta))
        return answer

    def crash(self) -> None:
        """The process died: only what was persisted is left."""
        self.meta = json.loads(json.dumps(self.durable))


async def _ask(trigger: WaitTrigger, ctx: WaitContext) -> Any:
    return await trigger.check(ctx)  # type: ignore[misc]


def looked(trigger: WaitTrigger, *probes: Probe, now_ms: int = START_MS) -> dict[str, Any]:
    """A sweep's batched look over ``probes``' gates: the ``shared`` its checks then read."""
    shared: dict[str, Any] = {}
    asyncio.run(trigger.prefetch([p.context(now_ms, shared) for p in probes]))
    return shared
