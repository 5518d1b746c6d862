"""Rendering recorded runs for ``zuke runs list`` and ``zuke runs show``.

A record holds text that any client wrote (actors, errors, parameters,
signal data), so every value is printed with its control characters escaped
(``\x1b`` as the four characters ``\x1b``): a record cannot move the cursor,
clear the screen, retitle the terminal or reorder text with bidi controls.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from zuke._clock import iso, parse_iso
from zuke._duration import format_duration
from zuke._fan_out import grouped
from zuke._inert import console_text
from zuke.cli.hints import resume_commands
from zuke.runs import RunCounts
from zuke.state._protocol import LockEntry
from zuke.state.records import RunRecord, RunSummary
from zuke.state.wire import shown_record_json, summary_to_json

_GLYPHS = {
    "pending": "·",
    "running": "»",
    "waiting": "~",
    "succeeded": "+",
    "failed": "x",
    "skipped": "-",
}


_UNSAFE_IN_JSON = re.compile(r"[\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")


def safe(value: object) -> str:
    """``value`` as text with control (tab too: a table's columns), bidi and line-separator
    characters escaped (:func:`zuke._inert.console_text`)."""
    return console_text(value, tabs=False)


def _json_safe(text: str) -> str:
    # JSON escapes C0 controls itself; C1 controls and bidi marks pass through when
    # ensure_ascii is off, so escape them as \uXXXX (still the same JSON value).
    return _UNSAFE_IN_JSON.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _none_found(where: str | None) -> str:
    return f"No runs found in {safe(where)}." if where else "No runs found."


def runs_table(runs: Sequence[RunSummary], where: str | None = None) -> str:
    """The runs as a table; none found names the store looked in (``where``)."""
    if not runs:
        return _none_found(where)
    rows = [("ID", "STATUS", "TARGET", "ACTOR", "CREATED")]
    rows += [
        (safe(r.id), safe(r.status), safe(r.root_target), safe(r.actor), safe(r.created_at))
        for r in runs
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
        for row in rows
    )


def runs_json(runs: Sequence[RunSummary]) -> str:
    return json.dumps([summary_to_json(r) for r in runs], indent=2)


def counts_text(counts: RunCounts, where: str | None = None) -> str:
    if counts.total == 0:
        return _none_found(where)
    return "\n".join(
        [f"Total: {counts.total}"] + [f"{safe(s)}: {n}" for s, n in counts.by_status.items()]
    )


def counts_json(counts: RunCounts) -> str:
    return json.dumps({"total": counts.total, "byStatus": counts.by_status}, indent=2)


def record_json(record: RunRecord) -> str:
    out = shown_record_json(record)  # a claim's token never: it renews and releases it
    return _json_safe(json.dumps(out, indent=2, ensure_ascii=False))


def _duration(started: str | None, ended: str | None) -> str:
    a, b = parse_iso(started or ""), parse_iso(ended or "")
    return format_duration(b - a) if a is not None and b is not None else ""


def holder_lines(r: RunRecord, claims: Sequence[LockEntry], now_ms: int) -> list[str]:
    """Who holds a running run now (its lease), and the locks the store says it holds."""
    lease = f"zuke-run-{r.id}"
    lines = []
    for claim in claims:
        state = "lapsed" if claim.expires_at <= now_ms else "live"
        until = iso(claim.expires_at)
        if claim.key == lease:
            lines.append(
                f"  held by:  {safe(claim.holder.actor)} since {safe(claim.holder.since)} "
                f"(lease {state}, until {until})"
            )
    others = [c for c in claims if c.key != lease]
    if not any(c.key == lease for c in claims):
        lines.append("  held by:  nobody (its lease is free: `zuke resume --check` reaps it)")
    for claim in others:
        state = "lapsed" if claim.expires_at <= now_ms else "live"
        lines.append(
            f"  lock:     {safe(claim.key)} fence {claim.fence}, {state} until "
            f"{iso(claim.expires_at)}"
        )
    return lines


def record_text(r: RunRecord, *, claims: Sequence[LockEntry] | None = None, now_ms: int = 0) -> str:
    build_id = f" ({safe(r.build_id)})" if r.build_id else ""
    lines = [
        f"Run {safe(r.id)}",
        f"  build:    {safe(r.build)}{build_id}",
        f"  target:   {safe(r.root_target)}",
        f"  status:   {safe(r.status)}",
        f"  actor:    {safe(r.actor)}",
        f"  created:  {safe(r.created_at)}",
        f"  updated:  {safe(r.updated_at)}",
    ]
    if r.deadline_at:
        lines.append(f"  deadline: {safe(r.deadline_at)}")
    if r.degraded:
        lines.append(
            "  degraded: yes — a change to this record was lost; some target statuses may be stale"
        )
    if r.locks:
        lines.append(f"  holding:  {', '.join(safe(k) for k in sorted(r.locks))}")
    if claims is not None:
        lines.extend(holder_lines(r, claims, now_ms))
    if r.params:
        lines.append("Parameters:")
        lines.extend(f"  {safe(k)} = {safe(v)}" for k, v in r.params.items())
    lines.append("Targets:")
    names = {name: safe(name) for name in r.targets}
    width = max((len(n) for n in names.values()), default=0)
    for name in grouped(r.targets):  # a fan-out's items right after it
        t = r.targets[name]
        if t.status == "waiting" and t.waiting_for is not None:
            deadline = f" (deadline {t.waiting_for.deadline})" if t.waiting_for.deadline else ""
            note = f"waiting for {t.waiting_for.trigger}{deadline}"
        elif t.error:
            note = t.error.splitlines()[0]
        else:
            note = _duration(t.started_at, t.ended_at)
        glyph = _GLYPHS.get(t.status, "?")
        row = f"  {glyph} {names[name]:<{width}}  {safe(t.status):<9}  {safe(note)}"
        lines.append(row.rstrip())
        for effect, fx in t.effects.items():
            tries = f", {fx.attempts} attempts" if fx.attempts > 1 else ""
            error = f": {fx.error}" if fx.error else ""
            lines.append(f"      effect {safe(effect)}: {safe(fx.status)}{tries}{safe(error)}")
        if t.environment:
            url = f"  {safe(t.environment_url)}" if t.environment_url else ""
            lines.append(f"      environment {safe(t.environment)}{url}")
    waiting = {
        name: t.waiting_for
        for name, t in r.targets.items()
        if t.status == "waiting" and t.waiting_for is not None
    }
    if r.status == "suspended":
        lines.append("Waiting:")
        for name, why in waiting.items():
            checked = f"; last checked {safe(why.checked_at)}" if why.checked_at else ""
            said = f" ({why.detail})" if why.detail else ""
            lines.append(f"  {names[name]}: {safe(why.trigger)}{checked}{safe(said)}")
        lines.append("Resume it with:")
        lines.extend(safe(line) for line in resume_commands(r.id, waiting))
    if r.signals:
        lines.append("Signals:")
        lines.extend(
            f"  {safe(name)}  {safe(json.dumps(s.data))}  (received {safe(s.received_at)})"
            for name, s in r.signals.items()
        )
    if r.events:
        lines.append("Audit:")
        for e in r.events:
            detail = f" — {safe(e.detail)}" if e.detail else ""
            lines.append(
                f"  {safe(e.at)}  {safe(e.tool)}  {safe(e.actor)}  {safe(e.outcome)}{detail}"
            )
    return "\n".join(lines)
