"""Opening an approval gate's thread once: the issue (or the request comment on a named thread).

* **Durable first.** The first check writes the marker (run, gate, commit),
  the starter and ``opening`` to the gate's state and makes them durable
  (``ctx.persist()``) *before* it opens the issue, so a process killed from
  then on leaves a trace the next check acts on.
* **Looked for, only among zuke's own.** A check that finds ``opening`` but no
  issue (a crash, a lost answer) looks for the marker before opening another
  — and adopts only what zuke's identity wrote, the oldest first
  (:func:`zuke_gh._approval_api.find_issue`): a copy someone opened with the
  same title and body is never taken for it.
* **Owed, not looked for,** when GitHub certainly did not act on the open
  (never sent, rate limited): the next check opens it, durable again first.
* **Refused with what to do** (issues disabled, a token without
  ``issues: write``, a named thread that is not there): the gate fails.

Every text sent goes through the run's redactor (``ctx.redact``), and the
marker kept is the redacted one, so it is found again as it was written.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any

from zuke import NotYet, WaitContext, WaitFailed
from zuke._clock import iso
from zuke_gh import _approval_api as api
from zuke_gh import _approval_text as text
from zuke_gh._approval_settings import ApprovalSpec
from zuke_gh._identity import identity
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError, answered, transient

#: How far GitHub's clock may be behind ours when looking for what an earlier check made.
SKEW_MS = 600_000


def gh_time(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ``, the form GitHub's ``since`` takes."""
    return iso(ms).split(".")[0].removesuffix("Z") + "Z"


def build_origin() -> str | None:
    """What built the release: ``ZUKE_BUILD_ID``, else the Actions run's URL."""
    env = os.environ
    if env.get("ZUKE_BUILD_ID"):
        return env["ZUKE_BUILD_ID"]
    server, repo, run = (env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY",
                                              "GITHUB_RUN_ID"))  # fmt: skip
    return f"{server or 'https://github.com'}/{repo}/actions/runs/{run}" if repo and run else None


def where(repo: api.Repo, state: Mapping[str, Any]) -> str:
    number = state.get("issue")
    return f"github_approval {repo.slug}" + (f"#{number}" if isinstance(number, int) else "")


async def open_thread(
    spec: ApprovalSpec, ctx: WaitContext, client: GitHubClient, repo: api.Repo
) -> NotYet | WaitFailed | None:
    """Open the issue (or the request comment) once; None when it is open now."""
    state = ctx.state.get()
    mark = state.get("marker")
    if not isinstance(mark, str):
        commit = os.environ.get("GITHUB_SHA", "").strip()
        mark = ctx.redact(text.marker(ctx.run_id, ctx.target, commit))
        ctx.state.set({"repo": repo.slug, "marker": mark, "commit": commit,
                       "starter": ctx.actor, "starterSource": ctx.actor_source,
                       "openingAt": ctx.now_ms, "opening": True})  # fmt: skip
        await ctx.persist()  # durable BEFORE the call: a crash from here on looks first
    elif state.get("opening") is True:  # an earlier check may have opened it
        found = await asyncio.to_thread(_find, spec, client, repo, mark, state)
        if found is not None:
            adopt(spec, ctx, found)
            return None
    else:  # an earlier attempt certainly did nothing: owed, and durable again first
        ctx.state.set({"opening": True, "openingAt": ctx.now_ms})
        await ctx.persist()
    state = ctx.state.get()
    body = ctx.redact(request_text(spec, ctx, repo, state))
    try:
        if spec.thread is None:
            title = ctx.redact(text.title(ctx.target, ctx.run_id, str(state.get("commit"))))
            made = await asyncio.to_thread(api.open_issue, client, repo, title, body)
        else:
            made = await asyncio.to_thread(api.comment, client, repo, spec.thread, body)
    except GitHubError as exc:
        return _open_failed(spec, ctx, repo, exc)
    adopt(spec, ctx, made)
    return None


def request_text(
    spec: ApprovalSpec, ctx: WaitContext, repo: api.Repo, state: Mapping[str, Any]
) -> str:
    """The issue's body: what is released, who may approve and how, the deadline."""
    starter = state.get("starter")
    who = text.who_may(
        role=spec.role, repo=repo.slug, approvals=spec.approvals, users=sorted(spec.users),
        teams=[f"{o}/{s}" for o, s in spec.teams],
        starter=starter if isinstance(starter, str) else None,
        starter_local=state.get("starterSource") != "github", no_self=spec.no_self_approval,
    )  # fmt: skip
    return text.request(
        mark=str(state.get("marker")), run_id=ctx.run_id, gate=ctx.target,
        commit=str(state.get("commit") or ""), build=build_origin(), params=ctx.params,
        who=who, deadline_ms=ctx.deadline_ms, redact=ctx.redact,
    )  # fmt: skip


def _find(
    spec: ApprovalSpec, client: GitHubClient, repo: api.Repo, mark: str, state: Mapping[str, Any]
) -> dict[str, Any] | None:
    at = state.get("openingAt")
    since = gh_time((at if isinstance(at, int) else 0) - SKEW_MS)
    if spec.thread is None:
        return api.find_issue(client, repo, mark, since, identity(client))
    return api.find_own_comment(client, repo, spec.thread, mark, since)


def adopt(spec: ApprovalSpec, ctx: WaitContext, made: Mapping[str, Any]) -> None:
    """Record the issue (or the request comment) GitHub made."""
    patch: dict[str, Any] = {"opening": None, "issueUrl": made.get("html_url")}
    if spec.thread is None:
        patch["issue"] = made.get("number")
    else:  # only comments after the request count: everything up to it is "judged"
        patch.update(issue=spec.thread, requestId=made.get("id"), lastId=made.get("id"))
    if not isinstance(patch["issue"], int):  # a malformed answer: look for it next time
        patch.update(opening=True, issue=None)
    ctx.state.set(patch)


def _open_failed(
    spec: ApprovalSpec, ctx: WaitContext, repo: api.Repo, exc: GitHubError
) -> NotYet | WaitFailed:
    at = where(repo, {})
    if api.not_acted_on(exc):
        ctx.state.set({"opening": False})  # owed: the next check opens without looking
        return NotYet(f"{at}: the approval issue was not opened ({exc}); a later check "
                      "opens it")  # fmt: skip
    if transient(exc):
        return NotYet(f"{at}: the answer to opening the approval issue was lost ({exc}); "
                      "the next check looks for it before opening another")  # fmt: skip
    thread = spec.thread
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
    return WaitFailed(f"{at}: GitHub refused to {what}: {said}")
