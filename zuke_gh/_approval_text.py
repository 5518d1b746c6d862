"""What the approval gate writes on GitHub and how it reads a command — pure functions.

The issue (or the comment on a named thread) starts with a hidden marker,
``<!-- zuke-approval run=<id> gate=<name> commit=<sha> -->``, that binds the
approval to what was shown: the run, the gate and the commit. The gate finds
its own issue by it after a crash, and a comment on any other run's thread
never reaches this gate. Values are percent-quoted in the marker, so no name
can end the HTML comment early.

A command is the *first line* of a comment: ``/approve`` (anything after it
is a note) or ``/deny [reason]`` (the reason is the rest of the line, else the
lines below). Everything the gate writes starts with something other than a
slash, so its own comments are never commands.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote, unquote

from zuke._clock import iso

Command = tuple[Literal["approve", "deny"], str]
_COMMAND = re.compile(r"/(approve|deny)(?:\s+(.*))?", re.IGNORECASE)
_MARKER = re.compile(r"<!-- zuke-approval run=(\S+) gate=(\S+) commit=(\S+) -->")
#: The longest deny reason kept (the rest of a long comment is on GitHub).
REASON_LIMIT = 500
#: The longest parameter value shown in the issue.
VALUE_LIMIT = 200


def _q(value: str) -> str:
    return quote(value, safe="[]._:@+=,")


def marker(run_id: str, gate: str, commit: str) -> str:
    """The hidden line that binds an approval to its run, gate and commit."""
    return f"<!-- zuke-approval run={_q(run_id)} gate={_q(gate)} commit={_q(commit)} -->"


def closing_marker(run_id: str, gate: str) -> str:
    """The hidden line of the gate's closing comment (found again after a lost answer)."""
    return f"<!-- zuke-approval-closed run={_q(run_id)} gate={_q(gate)} -->"


def parse_marker(body: str) -> dict[str, str] | None:
    """``{run, gate, commit}`` of the first approval marker in ``body``, if any."""
    found = _MARKER.search(body)
    if found is None:
        return None
    return {k: unquote(v) for k, v in zip(("run", "gate", "commit"), found.groups(), strict=True)}


def command(body: Any) -> Command | None:
    """The command a comment's first line gives, or ``None`` (not a command)."""
    if not isinstance(body, str):
        return None
    lines = body.replace("\r\n", "\n").strip().split("\n")
    found = _COMMAND.fullmatch(lines[0].strip())
    if found is None:
        return None
    verb: Literal["approve", "deny"] = "approve" if found.group(1).lower() == "approve" else "deny"
    rest = (found.group(2) or "").strip() or "\n".join(lines[1:]).strip()
    return verb, rest[:REASON_LIMIT]


def _code(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    if len(text) > VALUE_LIMIT:
        text = text[:VALUE_LIMIT] + "…"
    return f"<code>{html.escape(text)}</code>"  # no markdown, no @mention, no HTML of theirs


def who_may(
    *, role: str, repo: str, approvals: int, users: Sequence[str],
    teams: Sequence[str], starter: str | None,
) -> str:  # fmt: skip
    """The sentence that says who may approve."""
    text = f"anyone with the `{role}` role or higher on `{repo}`"
    allowed = [f"@{u}" for u in users] + [f"@{t}" for t in teams]
    if allowed:
        text += f" who is one of {', '.join(allowed)}"
        text += " (a team's members count)" if teams else ""
    if starter:
        text += f", except @{starter}, who started the run"
    need = "one approval is" if approvals == 1 else f"{approvals} approvals by different people are"
    return f"{text}. {need[0].upper()}{need[1:]} needed."


def title(gate: str, run_id: str, commit: str) -> str:
    short = commit[:12] if commit else "unknown commit"
    return f"zuke: approve {gate} of run {run_id} ({short})"


def request(
    *,
    mark: str,
    run_id: str,
    gate: str,
    commit: str,
    build: str | None,
    params: Mapping[str, Any],
    who: str,
    deadline_ms: int | None,
) -> str:
    """The issue's body (or the comment on a named thread)."""
    lines = [
        mark,
        f"### Approval needed: gate `{gate}` of zuke run `{run_id}`",
        "",
        "**What is released**",
        "",
        f"- commit: {_code(commit or 'unknown')}",
        f"- build: {_code(build) if build else 'not recorded'}",
    ]
    if params:
        lines.append("- parameters (secrets are never shown):")
        lines += [f"  - {_code(name)}: {_code(value)}" for name, value in sorted(params.items())]
    else:
        lines.append("- parameters: none")
    due = f"{iso(deadline_ms)} (the gate then times out)" if deadline_ms else "none"
    lines += [
        "",
        f"**Who may approve**: {who}",
        "",
        "**How**: comment with a first line of",
        "- `/approve` to approve the release, or",
        "- `/deny <reason>` to stop it.",
        "",
        "A comment counts as it was first read; later edits do not change it.",
        "",
        f"**Deadline**: {due}",
    ]
    return "\n".join(lines)


def refusal(login: str, verb: str, why: str) -> str:
    """The one polite reply to a command that did not count."""
    return f"Thank you, @{login}. Your `/{verb}` did not count: {why}"


def approved_by(decision: Mapping[str, Any]) -> str:
    """The audit trail's line: each approver's login, role, comment and time."""
    rows = decision.get("approvers")
    said = [
        f"@{a.get('login')} ({a.get('role')}) {a.get('url')} at {a.get('at')}"
        for a in (rows if isinstance(rows, list) else [])
        if isinstance(a, Mapping)
    ]
    return "approved by " + ", ".join(said)


def closing(decision: Mapping[str, Any], mark: str) -> str:
    """The closing comment: approved or denied, and by whom."""
    rows = decision.get("approvers")
    names = [
        f"@{a.get('login')} ({a.get('role')})"
        for a in (rows if isinstance(rows, list) else [])
        if isinstance(a, Mapping)
    ]
    if decision.get("approved") is True:
        return f"{mark}\nApproved by {', '.join(names)}. The release goes on."
    by = decision.get("deniedBy")
    who = f"@{by.get('login')} ({by.get('role')})" if isinstance(by, Mapping) else "someone"
    reason = decision.get("reason") or "no reason given"
    return f"{mark}\nDenied by {who}: {_code(reason)}. The release stops here."


def timed_out(mark: str, deadline_ms: int | None) -> str:
    when = f" at {iso(deadline_ms)}" if deadline_ms else ""
    return f"{mark}\nThe gate timed out{when}; comments here no longer count."
