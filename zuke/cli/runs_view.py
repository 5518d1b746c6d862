"""Rendering recorded runs for ``zuke runs list`` and ``zuke runs show``."""

from __future__ import annotations

import json
from collections.abc import Sequence

from zuke._clock import parse_iso
from zuke._duration import format_duration
from zuke.runs import RunCounts
from zuke.state.records import RunRecord, RunSummary
from zuke.state.wire import record_to_json, summary_to_json

_GLYPHS = {
    "pending": "·",
    "running": "»",
    "waiting": "~",
    "succeeded": "+",
    "failed": "x",
    "skipped": "-",
}


def runs_table(runs: Sequence[RunSummary]) -> str:
    if not runs:
        return "No runs found."
    rows = [("ID", "STATUS", "TARGET", "ACTOR", "CREATED")]
    rows += [(r.id, r.status, r.root_target, r.actor, r.created_at) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:4])) + "  " + row[4]
        for row in rows
    )


def runs_json(runs: Sequence[RunSummary]) -> str:
    return json.dumps([summary_to_json(r) for r in runs], indent=2)


def counts_text(counts: RunCounts) -> str:
    if counts.total == 0:
        return "No runs found."
    return "\n".join(
        [f"Total: {counts.total}"] + [f"{s}: {n}" for s, n in counts.by_status.items()]
    )


def counts_json(counts: RunCounts) -> str:
    return json.dumps({"total": counts.total, "byStatus": counts.by_status}, indent=2)


def record_json(record: RunRecord) -> str:
    return json.dumps(record_to_json(record), indent=2, ensure_ascii=False)


def _duration(started: str | None, ended: str | None) -> str:
    a, b = parse_iso(started or ""), parse_iso(ended or "")
    return format_duration(b - a) if a is not None and b is not None else ""


def record_text(r: RunRecord) -> str:
    lines = [
        f"Run {r.id}",
        f"  build:    {r.build}" + (f" ({r.build_id})" if r.build_id else ""),
        f"  target:   {r.root_target}",
        f"  status:   {r.status}",
        f"  actor:    {r.actor}",
        f"  created:  {r.created_at}",
        f"  updated:  {r.updated_at}",
    ]
    if r.deadline_at:
        lines.append(f"  deadline: {r.deadline_at}")
    if r.degraded:
        lines.append(
            "  degraded: yes — a change to this record was lost; some target statuses may be stale"
        )
    if r.locks:
        lines.append(f"  holding:  {', '.join(sorted(r.locks))}")
    if r.params:
        lines.append("Parameters:")
        lines.extend(f"  {k} = {v}" for k, v in r.params.items())
    lines.append("Targets:")
    width = max((len(n) for n in r.targets), default=0)
    for name, t in r.targets.items():
        if t.status == "waiting" and t.waiting_for is not None:
            deadline = f" (deadline {t.waiting_for.deadline})" if t.waiting_for.deadline else ""
            note = f"waiting for {t.waiting_for.trigger}{deadline}"
        elif t.error:
            note = t.error.splitlines()[0]
        else:
            note = _duration(t.started_at, t.ended_at)
        lines.append(f"  {_GLYPHS[t.status]} {name:<{width}}  {t.status:<9}  {note}".rstrip())
    if r.signals:
        lines.append("Signals:")
        lines.extend(
            f"  {name}  {json.dumps(s.data)}  (received {s.received_at})"
            for name, s in r.signals.items()
        )
    if r.events:
        lines.append("Audit:")
        for e in r.events:
            detail = f" — {e.detail}" if e.detail else ""
            lines.append(f"  {e.at}  {e.tool}  {e.actor}  {e.outcome}{detail}")
    return "\n".join(lines)
