"""``github_approval(...)``: a gate that asks for approval in a GitHub issue and waits for it.

Built on zuke's public trigger seam (:class:`~zuke._waits.WaitTrigger`), as
``github_workflow`` is; ``docs/github.md`` ("Approvals") describes it for
users. The decisions that matter:

* **The issue is opened once, durably first.** The first check writes the
  marker (run, gate, commit), the starter and ``opening`` to the gate's state
  and ``await ctx.persist()`` *then* opens the issue (or comments on the named
  thread). A check that finds ``opening`` but no issue (a crash, a lost
  answer) looks for the marker before opening another; an open GitHub
  certainly did not act on (never sent, rate limited) is owed, not looked for.
* **Each check is one request**: the comments since the last one seen, with
  the ETag kept in the gate's state (a 304 costs nothing and changes nothing,
  so a quiet sweep writes no state). Who may decide is asked only for a
  command (:mod:`zuke_gh._approval_judge`).
* **A decision is final.** It is written to the gate's state and made durable
  before anything else is said on GitHub; every later check answers from the
  state without a call, so no comment, edit or permission change afterwards
  moves it. Replies to commands that did not count go out after the ids of
  their comments are durable, so none is sent twice.
* **Late sweeps lose nothing.** Past the deadline the final check
  (``ctx.as_of_ms``) counts only comments created, and not edited, by then,
  and opens no issue. The timeout's comment goes out at most once: the hook
  looks for its own marker before posting.
* **Closing is housekeeping.** The closing comment and the closing of the
  issue follow the durable decision once, under the run's lease (a check
  that finds the decision made but the closing owed persists first, so a
  second sweep beside the deciding one is refused before it says a word); a failure is recorded
  (``closeError``), never a reason to hold the release. A named issue or pull
  request gets the closing comment but is never closed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

from zuke import NotYet, Satisfied, WaitContext, WaitFailed, WaitTrigger
from zuke._clock import iso, parse_iso
from zuke._provenance import resolve_actor
from zuke_gh import _approval_api as api
from zuke_gh import _approval_text as text
from zuke_gh._approval_judge import judge
from zuke_gh._approval_settings import (
    Approval,
    ApprovalSettings,
    ApprovalSpec,
    Approver,
    read_approval,
)
from zuke_gh._paths import repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError, answered, transient
from zuke_gh.workflow import sweep_client

__all__ = [
    "Approval",
    "ApprovalSettings",
    "ApprovalSpec",
    "Approver",
    "GitHubApprovalTrigger",
    "github_approval",
    "read_approval",
]

WaitResult = NotYet | Satisfied | WaitFailed
#: How far GitHub's clock may be behind ours when looking for what an earlier check made.
SKEW_MS = 600_000
#: How many comments one read returns before ``since`` moves on past them.
MOVE_SINCE_AFTER = 50


def github_approval(configure: Callable[[ApprovalSettings], Any]) -> WaitTrigger:
    """A trigger that opens an approval issue once and is satisfied when enough allowed
    people comment ``/approve`` (failed by an allowed ``/deny``):
    ``github_approval(lambda a: a.repo("acme/app").role("maintain").approvals(2))``."""
    settings = ApprovalSettings()
    configure(settings)
    return GitHubApprovalTrigger(settings.freeze())


def gh_time(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ``, the form GitHub's ``since`` takes."""
    return iso(ms).split(".")[0].removesuffix("Z") + "Z"


def _next_since(items: list[dict[str, Any]], since: str) -> str:
    """Where the next read starts: ``since`` itself while a read stays short, so the next
    query is the same and its ETag still matches (the check after a comment is a free 304
    again, and writes nothing); past ``MOVE_SINCE_AFTER`` comments, just before the newest
    (``since`` may be exclusive), to keep a read to about a page. Ids judged are kept, so a
    comment read again is never judged twice."""
    if len(items) < MOVE_SINCE_AFTER:
        return since
    stamps = [t for c in items if (t := parse_iso(str(c.get("updated_at")))) is not None]
    return max(gh_time(max(stamps) - 1000), since) if stamps else since


def _by(items: list[dict[str, Any]], as_of_ms: int) -> list[dict[str, Any]]:
    """The comments made by ``as_of_ms`` and not edited since (a gate's final check, past its
    deadline): a comment edited later may say what it did not say in time, so it does not
    count; GitHub keeps no earlier body to judge instead."""
    kept = []
    for c in items:
        made, edited = (parse_iso(str(c.get(k))) for k in ("created_at", "updated_at"))
        if made is not None and made <= as_of_ms and (edited is None or edited <= as_of_ms):
            kept.append(c)
    return kept


def _build_origin() -> str | None:
    env = os.environ
    if env.get("ZUKE_BUILD_ID"):
        return env["ZUKE_BUILD_ID"]
    server, repo, run = (env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY",
                                              "GITHUB_RUN_ID"))  # fmt: skip
    return f"{server or 'https://github.com'}/{repo}/actions/runs/{run}" if repo and run else None


class GitHubApprovalTrigger(WaitTrigger):
    """The trigger ``github_approval`` returns (its state: see ``docs/github.md``)."""

    #: past the deadline, only comments made (and not edited) by then count
    answers_as_of = True

    def __init__(self, spec: ApprovalSpec) -> None:
        self.spec = spec

    @property
    def descriptor(self) -> str:
        repo = "/".join(self.spec.repo) if self.spec.repo else "GITHUB_REPOSITORY"
        return f"github-approval:{repo}"

    def _client(self, shared: dict[str, Any]) -> GitHubClient:
        return sweep_client(self.spec.client, shared)

    def _repo(self, state: Mapping[str, Any]) -> api.Repo | str:
        """The repository (the recorded one first), or why there is none."""
        slug = state.get("repo")
        if not isinstance(slug, str):
            if self.spec.repo is not None:
                return api.Repo(*self.spec.repo)
            slug = os.environ.get("GITHUB_REPOSITORY", "").strip()
            if not slug:
                return ("github_approval: no repository: set a.repo(\"owner/name\") or "
                        "GITHUB_REPOSITORY")  # fmt: skip
        try:
            return api.Repo(*repo_slug(slug))
        except GitHubError as exc:
            return f"github_approval: GITHUB_REPOSITORY: {exc}"

    @staticmethod
    def _where(repo: api.Repo, state: Mapping[str, Any]) -> str:
        number = state.get("issue")
        return f"github_approval {repo.slug}" + (f"#{number}" if isinstance(number, int) else "")

    async def check(self, ctx: WaitContext) -> WaitResult:
        state = ctx.state.get()
        repo = self._repo(state)
        if isinstance(repo, str):
            return WaitFailed(repo)
        if isinstance(state.get("decision"), Mapping):  # decided earlier: no call but closing
            return await self._finish(ctx, repo, fresh=False)
        try:
            client = self._client(ctx.shared)
        except GitHubError as exc:  # an App key that cannot sign, a bad GITHUB_API_URL
            return WaitFailed(f"{self._where(repo, state)}: {exc}")
        if not isinstance(state.get("issue"), int):
            if ctx.as_of_ms is not None:  # past the deadline: nobody was asked in time
                return NotYet(f"{self._where(repo, state)}: no approval issue by the deadline")
            opened = await self._open(ctx, client, repo, state)
            if opened is not None:
                return opened
        try:
            return await self._poll(ctx, client, repo)
        except GitHubError as exc:
            where = self._where(repo, ctx.state.get())
            if exc.status in (404, 410):
                return WaitFailed(f"{where}: the thread is gone (deleted or moved): {exc}")
            return NotYet(f"{where}: could not ask GitHub about the comments ({exc}); the next "
                          "check asks again")  # fmt: skip

    # -- opening -----------------------------------------------------------------------------

    async def _open(
        self, ctx: WaitContext, client: GitHubClient, repo: api.Repo, state: dict[str, Any]
    ) -> WaitResult | None:
        """Open the issue (or the request comment) once; None when it is open now."""
        mark = state.get("marker")
        if not isinstance(mark, str):
            commit = os.environ.get("GITHUB_SHA", "").strip()
            mark = text.marker(ctx.run_id, ctx.target, commit)
            starter = ctx.actor or resolve_actor(None, os.environ)
            intent = {"repo": repo.slug, "marker": mark, "commit": commit, "starter": starter}
            ctx.state.set({**intent, "openingAt": ctx.now_ms, "opening": True})
            await ctx.persist()  # durable BEFORE the call: a crash from here on looks first
        elif state.get("opening") is True:  # an earlier check may have opened it
            found = await asyncio.to_thread(self._find, client, repo, mark, state)
            if found is not None:
                self._adopt(ctx, found)
                return None
        else:  # an earlier attempt certainly did nothing: owed, and durable again first
            ctx.state.set({"opening": True, "openingAt": ctx.now_ms})
            await ctx.persist()
        body = self._request_text(ctx, repo, ctx.state.get())
        try:
            if self.spec.thread is None:
                title = text.title(ctx.target, ctx.run_id, str(ctx.state.get().get("commit")))
                made = await asyncio.to_thread(api.open_issue, client, repo, title, body)
            else:
                made = await asyncio.to_thread(api.comment, client, repo, self.spec.thread, body)
        except GitHubError as exc:
            return await self._open_failed(ctx, repo, exc)
        self._adopt(ctx, made)
        return None

    def _request_text(self, ctx: WaitContext, repo: api.Repo, state: Mapping[str, Any]) -> str:
        spec = self.spec
        starter = state.get("starter") if spec.no_self_approval else None
        who = text.who_may(
            role=spec.role, repo=repo.slug, approvals=spec.approvals, users=sorted(spec.users),
            teams=[f"{o}/{s}" for o, s in spec.teams],
            starter=starter if isinstance(starter, str) else None,
        )  # fmt: skip
        return text.request(
            mark=str(state.get("marker")), run_id=ctx.run_id, gate=ctx.target,
            commit=str(state.get("commit") or ""), build=_build_origin(), params=ctx.params,
            who=who, deadline_ms=ctx.deadline_ms,
        )  # fmt: skip

    def _find(
        self, client: GitHubClient, repo: api.Repo, mark: str, state: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        at = state.get("openingAt")
        since = gh_time((at if isinstance(at, int) else 0) - SKEW_MS)
        if self.spec.thread is None:
            return api.find_issue(client, repo, mark, since)
        return api.find_comment(client, repo, self.spec.thread, mark, since)

    def _adopt(self, ctx: WaitContext, made: Mapping[str, Any]) -> None:
        """Record the issue (or the request comment) GitHub made."""
        created = made.get("created_at")
        since = created if isinstance(created, str) else None
        patch: dict[str, Any] = {"opening": None, "issueUrl": made.get("html_url"), "since": since}
        if self.spec.thread is None:
            patch["issue"] = made.get("number")
        else:
            patch.update(issue=self.spec.thread, requestId=made.get("id"))
        if not isinstance(patch["issue"], int):  # a malformed answer: look for it next time
            patch.update(opening=True, issue=None)
        if patch["since"] is None:
            patch["since"] = gh_time(ctx.now_ms - SKEW_MS)
        ctx.state.set(patch)

    async def _open_failed(self, ctx: WaitContext, repo: api.Repo, exc: GitHubError) -> WaitResult:
        where = self._where(repo, {})
        if api.not_acted_on(exc):
            ctx.state.set({"opening": False})  # owed: the next check opens without looking
            return NotYet(f"{where}: the approval issue was not opened ({exc}); a later check "
                          "opens it")  # fmt: skip
        if transient(exc):
            return NotYet(f"{where}: the answer to opening the approval issue was lost ({exc}); "
                          "the next check looks for it before opening another")  # fmt: skip
        thread = self.spec.thread
        what = "open the approval issue" if thread is None else f"comment on #{thread}"
        hint = ""
        if exc.status == 410:
            hint = " Issues are disabled there: enable them, or ask on a pull request with " \
                   ".on_pull_request(n)."  # fmt: skip
        elif exc.status == 404 and thread is not None:
            hint = f" Check that #{thread} exists in {repo.slug} and the token can see it."
        elif exc.status in (403, 404):
            hint = " Give the token `issues: write` (and `pull-requests: write` for a pull " \
                   "request) on the repository."  # fmt: skip
        said = str(exc)
        if hint and exc.status is not None:  # this call's own hint, not the client's generic one
            said = answered(exc.method or "POST", exc.path or "", exc.status, exc.detail or "",
                            hint.strip())  # fmt: skip
        return WaitFailed(f"{where}: GitHub refused to {what}: {said}")

    # -- reading the thread ------------------------------------------------------------------

    async def _poll(self, ctx: WaitContext, client: GitHubClient, repo: api.Repo) -> WaitResult:
        state = ctx.state.get()
        number, since = int(state["issue"]), str(state.get("since"))
        etag = state.get("etag") if state.get("etagSince") == since else None
        read = await asyncio.to_thread(
            api.comments_since, client, repo, number, since, etag if isinstance(etag, str) else None
        )
        if read.items is None:
            return NotYet(self._waiting(repo, state))  # a 304: nothing new, nothing written

        async def ask_role(login: str) -> str:
            return await asyncio.to_thread(api.role_of, ctx.shared, client, repo, login)

        async def ask_team(org: str, slug: str, login: str) -> bool:
            return await asyncio.to_thread(api.in_team, ctx.shared, client, org, slug, login)

        request_id = state.get("requestId")
        starter = state.get("starter")
        items = read.items if ctx.as_of_ms is None else _by(read.items, ctx.as_of_ms)
        tally = await judge(
            items, spec=self.spec, repo=repo.slug, state=state,
            starter=starter if isinstance(starter, str) else None,
            after_id=request_id if isinstance(request_id, int) else None,
            ask_role=ask_role, ask_team=ask_team,
        )  # fmt: skip
        patch: dict[str, Any] = {"seen": tally.seen, "approvers": tally.approvers,
                                 "since": _next_since(read.items, since), "etag": read.etag,
                                 "etagSince": since}  # fmt: skip
        if tally.decision is not None:
            patch["decision"] = {**tally.decision, "at": iso(ctx.now_ms)}
        ctx.state.set(patch)
        if tally.refused or tally.decision is not None:
            await ctx.persist()  # the ids judged and the decision, durable before we say a word
        for comment_id, reply in tally.refused:
            try:
                await asyncio.to_thread(api.comment, client, repo, number, reply)
            except GitHubError:  # at most once: a reply lost is not sent again
                ctx.state.set({"replyErrors": {str(comment_id): True}})
        if tally.decision is not None:
            return await self._finish(ctx, repo, fresh=True)
        return NotYet(self._waiting(repo, ctx.state.get()))

    def _waiting(self, repo: api.Repo, state: Mapping[str, Any]) -> str:
        rows = state.get("approvers")
        names = [f"@{r.get('login')}" for r in rows if isinstance(r, Mapping)] if isinstance(
            rows, list) else []  # fmt: skip
        got = f"{len(names)} of {self.spec.approvals} approvals"
        got += f" ({', '.join(names)})" if names else ""
        url = state.get("issueUrl")
        return (f"{self._where(repo, state)}: {got}; waiting for /approve from {self.spec.role} "
                f"or higher" + (f" at {url}" if isinstance(url, str) else ""))  # fmt: skip

    # -- the decision ------------------------------------------------------------------------

    async def _finish(self, ctx: WaitContext, repo: api.Repo, *, fresh: bool) -> WaitResult:
        """Close the thread once after the durable decision, then answer with it."""
        state = ctx.state.get()
        decision: Mapping[str, Any] = state["decision"]
        number = state.get("issue")
        if isinstance(number, int) and not state.get("closed") and not state.get("closeError"):
            if not fresh:  # a decision made elsewhere: take the run first, or say nothing
                await ctx.persist()  # (a sweep beside the deciding one is refused here)
            try:
                await self._close(ctx, repo, number, decision, fresh=fresh)
            except GitHubError as exc:  # recorded; the release does not wait on housekeeping
                ctx.state.set({"closeError": str(exc)})
        return self._verdict(repo, state, decision)

    async def _close(
        self, ctx: WaitContext, repo: api.Repo, number: int, decision: Mapping[str, Any],
        *, fresh: bool,
    ) -> None:  # fmt: skip
        client = self._client(ctx.shared)
        mark = text.closing_marker(ctx.run_id, ctx.target)
        if not isinstance(ctx.state.get().get("closeComment"), int):
            found = None
            if not fresh:  # a crash after the durable decision: did the comment go out?
                at = parse_iso(str(decision.get("at"))) or ctx.now_ms
                found = await asyncio.to_thread(
                    api.find_comment, client, repo, number, mark, gh_time(at - SKEW_MS)
                )
            if found is None:
                found = await asyncio.to_thread(
                    api.comment, client, repo, number, text.closing(decision, mark)
                )
            ctx.state.set({"closeComment": found.get("id")})
        if self.spec.thread is None:  # never close someone's own issue or pull request
            approved = decision.get("approved") is True
            await asyncio.to_thread(api.close_issue, client, repo, number, approved=approved)
        ctx.state.set({"closed": True})

    def _verdict(
        self, repo: api.Repo, state: Mapping[str, Any], decision: Mapping[str, Any]
    ) -> WaitResult:
        if decision.get("approved") is True:
            return Satisfied(dict(decision), audit=text.approved_by(decision))
        by = decision.get("deniedBy")
        who = f"@{by.get('login')} ({by.get('role')})" if isinstance(by, Mapping) else "someone"
        return WaitFailed(f"{self._where(repo, state)}: denied by {who}: "
                          f"{decision.get('reason') or 'no reason given'}")  # fmt: skip

    async def on_timeout(self, ctx: WaitContext) -> None:
        """Say on the thread that the gate timed out, and close the issue it opened.

        At most once: what this hook writes is not kept, and a process killed after the
        comment went out but before the timeout was settled leaves the next sweep to call it
        again — so it first looks for its own comment (the closing marker, posted after the
        deadline) and posts only if there is none. Closing again is harmless."""
        state = ctx.state.get()
        number, repo = state.get("issue"), self._repo(state)
        if not isinstance(number, int) or isinstance(repo, str) or "decision" in state:
            return
        client = self._client(ctx.shared)
        mark = text.closing_marker(ctx.run_id, ctx.target)
        since = gh_time((ctx.deadline_ms or ctx.now_ms) - SKEW_MS)
        said = await asyncio.to_thread(api.find_comment, client, repo, number, mark, since)
        if said is None:
            await asyncio.to_thread(api.comment, client, repo, number,
                                    text.timed_out(mark, ctx.deadline_ms))  # fmt: skip
        if self.spec.thread is None:
            await asyncio.to_thread(api.close_issue, client, repo, number, approved=False)
