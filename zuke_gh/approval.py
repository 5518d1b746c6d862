"""``github_approval(...)``: a gate that asks for approval in a GitHub issue and waits for it.

Built on zuke's public trigger seam (:class:`~zuke._waits.WaitTrigger`), as
``github_workflow`` is; ``docs/github.md`` ("Approvals") describes it for
users. The decisions that matter:

* **The issue is opened once, durably first**, and after a crash only an
  issue zuke's own identity wrote is adopted (:mod:`zuke_gh._approval_open`).
* **Reading cannot be blinded.** Each check reads the comments after the
  cursor the gate keeps (:mod:`zuke_gh._approval_reads`), in thread order,
  whatever page they are on; a sweep first asks every waiting gate at once
  whether anything is new (:meth:`GitHubApprovalTrigger.prefetch`: one
  GraphQL request for 100 gates), and a gate with nothing new makes no
  request. Who may decide is asked only for a command
  (:mod:`zuke_gh._approval_judge`), against the run's recorded starter.
* **A decision is final.** It is written to the gate's state and made durable
  before anything else is said on GitHub; every later check answers from the
  state without a call, so no comment, edit, deletion or permission change
  afterwards moves it. Replies to commands that did not count go out after
  the cursor past them is durable, so none is sent twice.
* **Late sweeps lose nothing, and count nothing late.** Past the deadline
  the final check (``ctx.as_of_ms``) counts only comments whose
  ``created_at`` plus 999 ms (GitHub's stamps have whole seconds) is by the
  deadline, and not edited after it; it opens no issue. The timeout's
  comment goes out at most once: the hook looks for its own marker, written
  by zuke's identity, before posting.
* **GitHub refusing the token is not a wait.** A 401, a 403 that is no rate
  limit or a repository GitHub does not show raises
  :class:`~zuke_gh.errors.GitHubAccessError`: the sweep goes red naming the
  credential, and the run stays waiting. A rate limit, an outage or a read
  budget spent is a wait.
* **Closing is housekeeping**, once, under the run's lease; a failure is
  recorded (``closeError``), never a reason to hold the release. A named
  issue or pull request gets the closing comment but is never closed.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from zuke import NotYet, Satisfied, WaitContext, WaitFailed, WaitTrigger
from zuke._clock import iso, parse_iso
from zuke_gh import _approval_api as api
from zuke_gh import _approval_reads as reads
from zuke_gh import _approval_text as text
from zuke_gh._approval_judge import judge, last_judged
from zuke_gh._approval_open import SKEW_MS, gh_time, open_thread, where
from zuke_gh._approval_settings import (
    Approval,
    ApprovalSettings,
    ApprovalSpec,
    Approver,
    read_approval,
)
from zuke_gh._paths import repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError, refused
from zuke_gh.workflow import sweep_client

__all__ = [
    "Approval",
    "ApprovalSettings",
    "ApprovalSpec",
    "Approver",
    "GitHubApprovalTrigger",
    "gh_time",
    "github_approval",
    "read_approval",
]

WaitResult = NotYet | Satisfied | WaitFailed
#: GitHub's ``created_at`` has whole seconds: a comment stamped T was made up to 999 ms later.
STAMP_SLACK_MS = 999


def github_approval(configure: Callable[[ApprovalSettings], Any]) -> WaitTrigger:
    """A trigger that opens an approval issue once and is satisfied when enough allowed
    people comment ``/approve`` (failed by an allowed ``/deny``):
    ``github_approval(lambda a: a.repo("acme/app").role("maintain").approvals(2))``."""
    settings = ApprovalSettings()
    configure(settings)
    return GitHubApprovalTrigger(settings.freeze())


def _by(items: list[dict[str, Any]], as_of_ms: int) -> list[dict[str, Any]]:
    """The comments certainly made by ``as_of_ms`` and not edited since (a gate's final
    check, past its deadline): a comment edited later may say what it did not say in time, so
    it does not count; GitHub keeps no earlier body to judge instead."""
    kept = []
    for c in items:
        made = parse_iso(str(c.get("created_at")))
        edited = parse_iso(str(c.get("edited_at"))) if c.get("edited_at") else None
        if made is not None and made + STAMP_SLACK_MS <= as_of_ms and (
            edited is None or edited + STAMP_SLACK_MS <= as_of_ms
        ):  # fmt: skip
            kept.append(c)
    return kept


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

    # -- a sweep's batched look --------------------------------------------------------------

    def batch_key(self) -> Hashable:
        """Gates with the same client (the environment's, or one factory's) share a query."""
        return ("zuke_gh.github_approval", self.spec.client)

    async def prefetch(self, gates: Sequence[WaitContext]) -> None:
        """Ask, for every waiting gate at once, whether its thread has anything after its
        cursor (one GraphQL point per 100 threads), and memoise the answers: a gate with
        nothing new then makes no request. A refused token is memoised too (raised by each
        check without a request) and raised here; a budget spent defers every gate."""
        asked: dict[str, reads.Asked] = {}
        for ctx in gates:
            thread = self._asked(ctx.state.get())
            if thread is not None:
                asked[_memo_key(ctx, thread)] = thread
        if not asked:
            return
        shared = gates[0].shared
        client = self._client(shared)
        batches = -(-len(set(asked.values())) // reads.BATCH)
        if not client.rates.affords("graphql", batches):
            said = client.rates.refusal("graphql", "reading the approval threads")
            shared.update(dict.fromkeys(asked, ("deferred", said)))
            return
        try:
            found = await asyncio.to_thread(reads.news, client, list(asked.values()))
        except GitHubError as exc:
            if refused(exc):
                failure = api.access_error(client, "github_approval", exc)
                shared.update(dict.fromkeys(asked, ("refused", failure)))
                raise failure from None
            raise
        shared.update({key: (found.get(thread, "ask"), None) for key, thread in asked.items()})

    def _asked(self, state: Mapping[str, Any]) -> reads.Asked | None:
        """What a batch would ask of this gate's thread (None: nothing to read: decided, not
        open yet, or its repository unknown)."""
        number, repo = state.get("issue"), self._repo(state)
        if isinstance(state.get("decision"), Mapping) or not isinstance(number, int) or (
            isinstance(repo, str)
        ):  # fmt: skip
            return None
        cursor = state.get("cursor")
        return reads.Asked(repo, number, self.spec.thread_kind or "issue",
                           cursor if isinstance(cursor, str) else None)  # fmt: skip

    # -- a check -----------------------------------------------------------------------------

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
            return WaitFailed(f"{where(repo, state)}: {exc}")
        try:
            if not isinstance(state.get("issue"), int):
                if ctx.as_of_ms is not None:  # past the deadline: nobody was asked in time
                    return NotYet(f"{where(repo, state)}: no approval issue by the deadline")
                opened = await open_thread(self.spec, ctx, client, repo)
                return opened or NotYet(self._waiting(repo, ctx.state.get()))
            return await self._poll(ctx, client, repo)
        except GitHubError as exc:
            return self._read_failed(client, repo, ctx.state.get(), exc)

    def _read_failed(
        self, client: GitHubClient, repo: api.Repo, state: Mapping[str, Any], exc: GitHubError
    ) -> WaitResult:
        at = where(repo, state)
        kind = getattr(exc, "kind", None)
        listing = exc.status == 404 and (exc.path or "").endswith("/issues")  # the repository's
        if refused(exc) or kind == "repository" or listing:
            raise api.access_error(client, at, exc) from None
        if kind == "thread" or exc.status in (404, 410):
            return WaitFailed(f"{at}: the thread is gone (deleted or moved): {exc}")
        return NotYet(f"{at}: could not ask GitHub about the comments ({exc}); the next check "
                      "asks again")  # fmt: skip

    async def _poll(self, ctx: WaitContext, client: GitHubClient, repo: api.Repo) -> WaitResult:
        state = ctx.state.get()
        thread = self._asked(state)
        assert thread is not None
        said, why = ctx.shared.get(_memo_key(ctx, thread), (None, None))
        if said == "refused" and isinstance(why, api.ApprovalAccessError):
            raise why  # the batch already heard GitHub refuse the token: no request
        if said == "deferred":
            return NotYet(f"{self._waiting(repo, state)}; {why}")
        if said == "idle":
            return NotYet(self._waiting(repo, state))  # nothing after the cursor: no request
        if not client.rates.affords("graphql", 1):
            deferred = client.rates.refusal("graphql", "reading the thread")
            return NotYet(f"{self._waiting(repo, state)}; {deferred}")
        request_id = state.get("requestId")
        read = await asyncio.to_thread(
            reads.read_thread, client, repo, thread.number, thread.kind, cursor=thread.cursor,
            last_id=last_judged(state), issue_url=_str(state.get("issueUrl")),
        )  # fmt: skip
        items = read.comments if ctx.as_of_ms is None else _by(read.comments, ctx.as_of_ms)

        async def ask_role(login: str) -> str:
            return await asyncio.to_thread(api.role_of, ctx.shared, client, repo, login)

        async def ask_team(org: str, slug: str, login: str) -> bool:
            return await asyncio.to_thread(api.in_team, ctx.shared, client, repo, org, slug, login)

        tally = await judge(
            items, spec=self.spec, repo=repo.slug, state=state, starter=ctx.actor,
            after_id=request_id if isinstance(request_id, int) else None,
            ask_role=ask_role, ask_team=ask_team,
        )  # fmt: skip
        patch: dict[str, Any] = {"approvers": tally.approvers, "cursor": read.cursor,
                                 "lastId": tally.last_id, "seen": None, "since": None,
                                 "etag": None, "etagSince": None}  # fmt: skip
        if tally.decision is not None:
            patch["decision"] = {**tally.decision, "at": iso(ctx.now_ms)}
        ctx.state.set(patch)
        if tally.refused or tally.decision is not None:
            await ctx.persist()  # the cursor and the decision, durable before we say a word
        for comment_id, reply in tally.refused:
            try:
                await asyncio.to_thread(api.comment, client, repo, thread.number,
                                        ctx.redact(reply))  # fmt: skip
            except GitHubError:  # at most once: a reply lost is not sent again
                ctx.state.set({"replyErrors": {str(comment_id): True}})
        if tally.decision is not None:
            return await self._finish(ctx, repo, fresh=True)
        waiting = self._waiting(repo, ctx.state.get())
        if read.more:
            waiting += (f"; read {len(read.comments)} new comments ({read.pages} pages, this "
                        "check's budget): more remain, the next check reads on")  # fmt: skip
        return NotYet(waiting)

    def _waiting(self, repo: api.Repo, state: Mapping[str, Any]) -> str:
        rows = state.get("approvers")
        names = [f"@{r.get('login')}" for r in rows if isinstance(r, Mapping)] if isinstance(
            rows, list) else []  # fmt: skip
        got = f"{len(names)} of {self.spec.approvals} approvals"
        got += f" ({', '.join(names)})" if names else ""
        url = state.get("issueUrl")
        return (f"{where(repo, state)}: {got}; waiting for /approve from {self.spec.role} "
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
        mark = ctx.redact(text.closing_marker(ctx.run_id, ctx.target))
        if not isinstance(ctx.state.get().get("closeComment"), int):
            found = None
            if not fresh:  # a crash after the durable decision: did the comment go out?
                at = parse_iso(str(decision.get("at"))) or ctx.now_ms
                found = await asyncio.to_thread(
                    api.find_own_comment, client, repo, number, mark, gh_time(at - SKEW_MS)
                )
            if found is None:
                found = await asyncio.to_thread(
                    api.comment, client, repo, number, ctx.redact(text.closing(decision, mark))
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
        return WaitFailed(f"{where(repo, state)}: denied by {who}: "
                          f"{decision.get('reason') or 'no reason given'}")  # fmt: skip

    async def on_timeout(self, ctx: WaitContext) -> None:
        """Say on the thread that the gate timed out, and close the issue it opened.

        At most once: what this hook writes is not kept, and a process killed after the
        comment went out but before the timeout was settled leaves the next sweep to call it
        again — so it first looks for its own comment (the closing marker, posted after the
        deadline by zuke's identity: a copy someone else pre-posted suppresses nothing) and
        posts only if there is none. Closing again is harmless."""
        state = ctx.state.get()
        number, repo = state.get("issue"), self._repo(state)
        if not isinstance(number, int) or isinstance(repo, str) or "decision" in state:
            return
        client = self._client(ctx.shared)
        mark = ctx.redact(text.closing_marker(ctx.run_id, ctx.target))
        since = gh_time((ctx.deadline_ms or ctx.now_ms) - SKEW_MS)
        said = await asyncio.to_thread(api.find_own_comment, client, repo, number, mark, since)
        if said is None:
            await asyncio.to_thread(api.comment, client, repo, number,
                                    ctx.redact(text.timed_out(mark, ctx.deadline_ms)))  # fmt: skip
        if self.spec.thread is None:
            await asyncio.to_thread(api.close_issue, client, repo, number, approved=False)


def _memo_key(ctx: WaitContext, thread: reads.Asked) -> str:
    cursor = thread.cursor or "-"
    return f"zuke_gh.approval {ctx.run_id} {ctx.target} {thread.repo.slug}#{thread.number} {cursor}"


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
