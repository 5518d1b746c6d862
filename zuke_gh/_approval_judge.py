"""Which comments decide an approval gate: the rules, apart from the calls that feed them.

* A comment is judged **once, on its id and the body first read**, in id
  order: the highest id judged (``lastId``) is kept, so an edit changes
  nothing, nor does a comment turned into a command later, and a comment
  deleted after it was judged is not taken back (an approval counted stays
  counted: to stop a release, ``/deny``).
* A command counts only from a user whose role now is at least the gate's
  (``role_name``, a custom role by its exact grant), who is in the
  allow-lists when set (a login in ``users()`` or an active member of a team in
  ``teams()``), and, for ``/approve`` under ``no_self_approval()``, who did not
  start the run — the run's recorded starter, compared case-insensitively; a
  starter zuke has no record of refuses every approval. Anyone else gets one
  reply saying why (the caller sends it).
* ``approvals(n)`` counts distinct logins; the first ``/deny`` that counts, or
  the n-th approver, decides, and nothing after it in the thread is read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zuke_gh import _approval_text as text
from zuke_gh._approval_settings import ApprovalSpec, at_least

AskRole = Callable[[str], Awaitable[str]]
AskTeam = Callable[[str, str, str], Awaitable[bool]]


@dataclass
class Tally:
    """What one read of the thread changed."""

    #: counted approvers so far: {login, role, url, at}
    approvers: list[dict[str, Any]]
    #: the highest comment id judged so far (every comment up to it is judged)
    last_id: int | None
    #: (comment id, reply) for each command that did not count, in thread order
    refused: list[tuple[int, str]] = field(default_factory=list)
    decision: dict[str, Any] | None = None


def comment_id(comment: Mapping[str, Any]) -> int | None:
    value = comment.get("id")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def last_judged(state: Mapping[str, Any]) -> int | None:
    """The highest comment id the gate judged (``lastId``; a record from before it kept the
    ids judged in ``seen``)."""
    last = state.get("lastId")
    if isinstance(last, int) and not isinstance(last, bool):
        return last
    seen = state.get("seen")
    ids = [i for i in seen if isinstance(i, int)] if isinstance(seen, list) else []
    return max(ids) if ids else None


def _login(comment: Mapping[str, Any]) -> str | None:
    user = comment.get("user")
    login = user.get("login") if isinstance(user, Mapping) else None
    return login if isinstance(login, str) and login else None


def _row(comment: Mapping[str, Any], login: str, role: str) -> dict[str, Any]:
    url, at = comment.get("html_url"), comment.get("created_at")
    return {"login": login, "role": role, "url": url if isinstance(url, str) else "",
            "at": at if isinstance(at, str) else ""}  # fmt: skip


async def why_not(
    spec: ApprovalSpec, repo: str, verb: str, login: str, starter: str | None,
    ask_role: AskRole, ask_team: AskTeam,
) -> tuple[str | None, str]:  # fmt: skip
    """(why the command does not count, or None; the user's role, or "" when not asked)."""
    if verb == "approve" and spec.no_self_approval and starter is None:
        return ("zuke has no record of who started this release, so under `no_self_approval()` "
                "no approval counts; ask for a new release.", "")  # fmt: skip
    if verb == "approve" and spec.no_self_approval and login.lower() == (starter or "").lower():
        return "whoever started the release cannot approve it (`no_self_approval()`).", ""
    role = await ask_role(login)
    if not at_least(role, spec.role):
        return (f"approving or denying this release needs the `{spec.role}` role or higher on "
                f"`{repo}`, and yours is `{role}`.", role)  # fmt: skip
    if spec.users or spec.teams:
        allowed = login.lower() in spec.users
        for org, slug in spec.teams:
            if allowed:
                break
            allowed = await ask_team(org, slug, login)
        if not allowed:
            names = [f"@{u}" for u in sorted(spec.users)] + [f"@{o}/{s}" for o, s in spec.teams]
            return f"only {', '.join(names)} may decide on this release.", role
    return None, role


async def judge(
    comments: Sequence[Mapping[str, Any]],
    *,
    spec: ApprovalSpec,
    repo: str,
    state: Mapping[str, Any],
    starter: str | None,
    after_id: int | None,
    ask_role: AskRole,
    ask_team: AskTeam,
) -> Tally:
    """Judge the comments not judged before (ids above ``lastId`` and ``after_id``), in id
    order, until one decides."""
    rows = state.get("approvers")
    approvers = [dict(r) for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []
    tally = Tally(approvers, last_judged(state))
    floor = max(tally.last_id or 0, after_id or 0)
    fresh = sorted((c for c in comments if (comment_id(c) or 0) > floor),
                   key=lambda c: comment_id(c) or 0)  # fmt: skip
    for found in fresh:
        ident = comment_id(found)
        assert ident is not None
        tally.last_id = ident
        login, said = _login(found), text.command(found.get("body"))
        if said is None or login is None:
            continue
        verb, rest = said
        why, role = await why_not(spec, repo, verb, login, starter, ask_role, ask_team)
        if why is not None:
            tally.refused.append((ident, text.refusal(login, verb, why)))
            continue
        row = _row(found, login, role)
        if verb == "deny":
            tally.decision = {"approved": False, "approvers": tally.approvers, "deniedBy": row,
                              "reason": rest or "no reason given"}  # fmt: skip
            break
        if any(a.get("login", "").lower() == login.lower() for a in tally.approvers):
            left = spec.approvals - len(tally.approvers)
            why = (f"your approval is already counted; {left} more, by someone else, "
                   "is needed.")  # fmt: skip
            tally.refused.append((ident, text.refusal(login, verb, why)))
            continue
        tally.approvers.append(row)
        if len(tally.approvers) >= spec.approvals:
            tally.decision = {"approved": True, "approvers": tally.approvers}
            break
    return tally
