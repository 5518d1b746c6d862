"""What the approval gate writes on GitHub and how it reads a command — pure functions.

The issue (or the comment on a named thread) starts with a hidden marker,
``<!-- zuke-approval run=<id> gate=<name> commit=<sha> -->``, that binds the
approval to what was shown: the run, the gate and the commit. The gate finds
its own issue by it after a crash — only among what zuke's own identity wrote
(:mod:`zuke_gh._identity`) — and a comment on any other run's thread never
reaches this gate. Values are percent-quoted in the marker, so no name can
end the HTML comment early.

**Nothing zuke writes renders text it did not make.** Every value that is
not zuke's own wording — a parameter, a deny reason, a login typed locally,
the build's origin, even a gate's name — goes into a Markdown code span
(:func:`inert`): GitHub renders no Markdown, HTML, link, @mention or
``#reference`` inside one. Line breaks (CR, LF, U+2028, U+2029) and other
control characters become spaces first (a blank line would end the span),
and the fence is longer than any run of backticks inside. The only links are
the ones GitHub made (the issue, the comments). The gate passes every text
through the run's secret redactor (``ctx.redact``) before it is sent.

A command is the *first line* of a comment: ``/approve`` (anything after it
is a note) or ``/deny [reason]`` (the reason is the rest of the line, else the
lines below). Everything the gate writes starts with something other than a
slash, so its own comments are never commands.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal
from urllib.parse import quote, unquote

from zuke._clock import iso

Command = tuple[Literal["approve", "deny"], str]
Redact = Callable[[str], str]
_COMMAND = re.compile(r"/(approve|deny)(?:\s+(.*))?", re.IGNORECASE)
_MARKER = re.compile(r"<!-- zuke-approval run=(\S+) gate=(\S+) commit=(\S+) -->")
#: A login GitHub could have (an App's ends in ``[bot]``): only such a name is written ``@name``.
_LOGIN = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}(?:\[bot\])?")
#: Line breaks and other control characters: a space in inert text (U+2028/9 included).
_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_TICKS = re.compile(r"`+")
#: The longest deny reason kept (the rest of a long comment is on GitHub).
REASON_LIMIT = 500
#: The longest parameter value shown in the issue.
VALUE_LIMIT = 200
#: GitHub's longest issue title.
TITLE_LIMIT = 256


def _q(value: str) -> str:
    return quote(value, safe="[]._:@+=,")


def _same(text: str) -> str:
    return text


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
    lines = re.split(r"\r\n|[\r\n\u2028\u2029]", body.strip())
    found = _COMMAND.fullmatch(lines[0].strip())
    if found is None:
        return None
    verb: Literal["approve", "deny"] = "approve" if found.group(1).lower() == "approve" else "deny"
    rest = (found.group(2) or "").strip() or "\n".join(lines[1:]).strip()
    return verb, rest[:REASON_LIMIT]


def inert(value: Any, limit: int = VALUE_LIMIT) -> str:
    """``value`` as a Markdown code span GitHub renders as the plain characters: no Markdown,
    HTML, link, mention or reference, on one line, at most ``limit`` characters."""
    text = value if isinstance(value, str) else repr(value)
    text = _BREAKS.sub(" ", text)
    if len(text) > limit:
        text = text[:limit] + "…"
    if not text.strip():
        return "(empty)" if not text else "(blank)"
    fence = "`" * (max((len(t) for t in _TICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def mention(login: Any) -> str:
    """``@login`` for a name GitHub could have given (it pings them), else the name inert."""
    if isinstance(login, str) and _LOGIN.fullmatch(login):
        return f"@{login}"
    return inert(login, 60)


def plain(text: str, limit: int = TITLE_LIMIT) -> str:
    """One line of plain text (an issue title): no control characters, at most ``limit``."""
    flat = " ".join(_BREAKS.sub(" ", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def who_may(
    *, role: str, repo: str, approvals: int, users: Sequence[str],
    teams: Sequence[str], starter: str | None, starter_local: bool = False,
    no_self: bool = False,
) -> str:  # fmt: skip
    """The sentence that says who may approve (and, with ``no_self``, who may not)."""
    text = f"anyone with the `{role}` role or higher on {inert(repo)}"
    allowed = [f"@{u}" for u in users] + [f"@{t}" for t in teams]
    if allowed:
        text += f" who is one of {', '.join(allowed)}"
        text += " (a team's members count)" if teams else ""
    if no_self and starter is None:
        text += (", except whoever started the run — and zuke has no record of who did, so no "
                 "approval counts here (`no_self_approval()`)")  # fmt: skip
    elif no_self and starter_local:
        text += (f", except the GitHub login {inert(starter, 60)}: the run was started under "
                 "that name locally (`--actor`, `ZUKE_ACTOR` or the account name), which GitHub "
                 "never vouched for, so an approval from the login of that name does not "
                 "count")  # fmt: skip
    elif no_self:
        text += f", except {mention(starter)}, who started the run"
    need = "one approval is" if approvals == 1 else f"{approvals} approvals by different people are"
    return f"{text}. {need[0].upper()}{need[1:]} needed."


def title(gate: str, run_id: str, commit: str) -> str:
    short = commit[:12] if commit else "unknown commit"
    return plain(f"zuke: approve {gate} of run {run_id} ({short})")


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
    redact: Redact = _same,
) -> str:
    """The issue's body (or the comment on a named thread). A value is redacted before it is
    cut to its length, so no cut can leave part of a secret the redactor would not know."""

    def shown(value: Any) -> str:
        return inert(redact(value if isinstance(value, str) else repr(value)))

    lines = [
        mark,
        f"### Approval needed: gate {shown(gate)} of zuke run {shown(run_id)}",
        "",
        "**What is released**",
        "",
        f"- commit: {shown(commit or 'unknown')}",
        f"- build: {shown(build) if build else 'not recorded'}",
    ]
    if params:
        lines.append("- parameters (secrets are never shown):")
        lines += [f"  - {shown(name)}: {shown(value)}" for name, value in sorted(params.items())]
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
        "Each comment counts once, as it was first read: a later edit or deletion changes "
        "nothing (to stop an approved release, `/deny` before the last approval).",
        "",
        f"**Deadline**: {due}",
    ]
    return "\n".join(lines)


def refusal(login: str, verb: str, why: str) -> str:
    """The one polite reply to a command that did not count."""
    return f"Thank you, {mention(login)}. Your `/{verb}` did not count: {why}"


def _rows(decision: Mapping[str, Any], key: str = "approvers") -> list[Mapping[str, Any]]:
    rows = decision.get(key)
    return [a for a in (rows if isinstance(rows, list) else []) if isinstance(a, Mapping)]


def approved_by(decision: Mapping[str, Any]) -> str:
    """The audit trail's line: each approver's login, role, comment and time."""
    said = [f"@{a.get('login')} ({a.get('role')}) {a.get('url')} at {a.get('at')}"
            for a in _rows(decision)]  # fmt: skip
    return "approved by " + ", ".join(said)


def _who(row: Mapping[str, Any]) -> str:
    role = row.get("role")
    said = role if isinstance(role, str) and role.isalpha() else inert(role, 40)
    return f"{mention(row.get('login'))} ({said})"


def closing(decision: Mapping[str, Any], mark: str) -> str:
    """The closing comment: approved or denied, and by whom (the reason inert)."""
    if decision.get("approved") is True:
        names = ", ".join(_who(a) for a in _rows(decision))
        return f"{mark}\nApproved by {names}. The release goes on."
    by = decision.get("deniedBy")
    who = _who(by) if isinstance(by, Mapping) else "someone"
    reason = decision.get("reason") or "no reason given"
    return f"{mark}\nDenied by {who}: {inert(reason, REASON_LIMIT)}. The release stops here."


def timed_out(mark: str, deadline_ms: int | None) -> str:
    when = f" at {iso(deadline_ms)}" if deadline_ms else ""
    return f"{mark}\nThe gate timed out{when}; comments here no longer count."
