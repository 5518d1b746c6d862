"""The release dashboard's text: what is waiting, for whom, since when — from run records alone.

Pure: records in, markdown out (no GitHub call, no clock), so the same records give the same
text and a sweep edits the issue only when something changed (:func:`content_of` is what is
compared: the last line, the date of the sweep that wrote it, is left out).

* **What it shows.** Every gate of every suspended run: the run, its build and target, the
  gate and its trigger, what the trigger last said (the approvals so far and who may give
  them, the signal), since when it waits and its deadline, the run's parameters, and links
  to the approval issue and the workflow run it follows; then the last few finished runs
  with their outcome. A trigger's own words are shown only for the triggers whose words
  do not count time (``github-approval``, ``signal``): a workflow gate says "waited 300 s",
  which would change the page on every sweep; its run's link says more.
* **Nothing in it acts.** Every value from a record — parameter values, targets, a gate's
  detail (which may quote a comment or a login) — goes through ``zuke._inert``: a code span
  (no mention, no ``#123`` reference, no link, no HTML), after the redactor masked any
  secret the process knows; an ``<!--`` in it gets an invisible word joiner, so no marker
  of zuke's (an approval issue's, the dashboard's own) is ever copied into the body. Links
  are only to URLs built here from checked parts, on the server's own address
  (``summary_link`` refuses anything else).
* **Bounded.** GitHub refuses an issue body over 65,536 characters; rows that do not fit
  under :data:`BODY_CAP_BYTES` are left out from the end with a line saying how many.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from zuke._clock import iso, parse_iso
from zuke._inert import summary_code, summary_fit, summary_link, summary_text
from zuke.state.records import RunRecord, RunSummary

#: what zuke writes first in the dashboard's body: found again by it (and by its author)
MARKER_PREFIX = "<!-- zuke-dashboard repo="
#: the last line: the date of the sweep that wrote the body; never counts as a change
STAMP = "<!-- zuke-dashboard-swept -->"
TITLE = "zuke: releases waiting"
LABEL = "zuke"
#: GitHub's limit is 65,536 characters (a character is at least a byte): room to spare
BODY_CAP_BYTES = 60_000
#: how much of one value (a parameter, a gate's words) a cell shows
VALUE_CHARS = 120
DETAIL_CHARS = 300
#: parameters shown per run; the rest are counted
MAX_PARAMS = 8
#: triggers whose ``detail`` does not count time, so showing it changes nothing needlessly
STEADY_TRIGGERS = ("github-approval:", "signal:")
TERMINAL = ("succeeded", "failed", "cancelled")
_SLUG = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")

Redact = Callable[[str], str]


def marker(repo: str) -> str:
    return f"{MARKER_PREFIX}{repo.lower()} -->"


@dataclass(frozen=True)
class WaitingGate:
    """One gate of one suspended run, as the dashboard lists it."""

    run_id: str
    build: str
    target: str
    gate: str
    trigger: str
    detail: str | None
    since: str | None
    deadline: str | None
    params: Mapping[str, str] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()  # (text, URL built here)


@dataclass(frozen=True)
class Finished:
    run_id: str
    build: str
    target: str
    outcome: str
    at: str


def waiting_gates(record: RunRecord, server: str) -> list[WaitingGate]:
    """The gates ``record`` waits at (none unless it is suspended), in the record's order."""
    if record.status != "suspended":
        return []
    out = []
    for name, row in record.targets.items():
        why = row.waiting_for
        if row.status != "waiting" or why is None:
            continue
        steady = why.trigger.startswith(STEADY_TRIGGERS)
        out.append(WaitingGate(
            run_id=record.id, build=record.build, target=record.root_target, gate=name,
            trigger=why.trigger, detail=why.detail if steady else None,
            since=row.started_at or record.parked_at, deadline=why.deadline,
            params=dict(record.params), links=gate_links(row.meta, server),
        ))  # fmt: skip
    return out


def gate_links(meta: Mapping[str, Any], server: str) -> tuple[tuple[str, str], ...]:
    """The approval issue and the workflow run a gate's state names, as URLs on ``server``
    built from checked parts (a recorded URL is only compared, never linked as it is)."""
    links: list[tuple[str, str]] = []
    repo, issue = meta.get("repo"), meta.get("issue")
    if isinstance(repo, str) and _SLUG.fullmatch(repo) and _count(issue):
        links.append((f"approval {repo}#{issue}", f"{server}/{repo}/issues/{issue}"))
    run_id, followed = meta.get("runId"), meta.get("runUrl")
    if _count(run_id) and isinstance(followed, str):
        found = re.fullmatch(rf"{re.escape(server)}/({_SLUG.pattern})/actions/runs/([0-9]+)",
                             followed)  # fmt: skip
        if found and int(found.group(2)) == run_id:
            links.append((f"workflow run {run_id}",
                          f"{server}/{found.group(1)}/actions/runs/{run_id}"))  # fmt: skip
    return tuple(links)


def _count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def last_ended(rows: Sequence[RunSummary], limit: int) -> list[Finished]:
    """The ``limit`` runs that ended last (by their record's last write), newest first."""
    ended = [r for r in rows if r.status in TERMINAL]
    ended.sort(key=lambda r: (parse_iso(r.updated_at) or 0, r.id), reverse=True)
    return [Finished(r.id, r.build, r.root_target, r.status, r.updated_at) for r in ended[:limit]]


def when(stamp: str | None) -> str:
    """``2026-12-07 13:05 UTC`` (to the minute: what a reader needs, and steady)."""
    ms = parse_iso(stamp) if stamp else None
    if ms is None:
        return "—"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def _code(value: str, redact: Redact, limit: int) -> str:
    text = redact(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    # no marker of zuke's (``<!-- zuke-…``) may appear in the body but its own: a copied
    # approval marker would make the approval gate's look for its issue find this one
    return summary_code(text.replace("<!--", "<!-\u2060-"))


def _params(params: Mapping[str, str], redact: Redact) -> str:
    shown = [_code(f"{k}={v}", redact, VALUE_CHARS) for k, v in sorted(params.items())]
    more = len(shown) - MAX_PARAMS
    cells = shown[:MAX_PARAMS] + ([f"+{more} more"] if more > 0 else [])
    return " ".join(cells) or "—"


def _waiting_row(gate: WaitingGate, redact: Redact) -> str:
    waits = _code(gate.trigger, redact, VALUE_CHARS)
    if gate.detail:
        waits += " " + _code(gate.detail, redact, DETAIL_CHARS)
    links = " · ".join(summary_link(text, url) for text, url in gate.links) or "—"
    cells = [
        _code(gate.run_id, redact, VALUE_CHARS),
        f"{_code(gate.build, redact, VALUE_CHARS)} → {_code(gate.target, redact, VALUE_CHARS)}",
        _code(gate.gate, redact, VALUE_CHARS), waits, when(gate.since), when(gate.deadline),
        _params(gate.params, redact), links,
    ]  # fmt: skip
    return "| " + " | ".join(cells) + " |\n"


def _finished_row(run: Finished, redact: Redact) -> str:
    cells = [_code(run.run_id, redact, VALUE_CHARS),
             f"{_code(run.build, redact, VALUE_CHARS)} → {_code(run.target, redact, VALUE_CHARS)}",
             summary_text(run.outcome), when(run.at)]  # fmt: skip
    return "| " + " | ".join(cells) + " |\n"


WAITING_HEAD = ("| Run | Build → target | Gate | Waits for | Since | Deadline | Parameters | "
                "Links |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n")  # fmt: skip
FINISHED_HEAD = "| Run | Build → target | Outcome | Finished |\n| --- | --- | --- | --- |\n"


def content(
    repo: str, waiting: Sequence[WaitingGate], finished: Sequence[Finished], redact: Redact
) -> str:
    """The dashboard's body without its last line: what a sweep compares before editing."""
    head = (f"{marker(repo)}\n## Releases waiting\n\nRuns of zuke suspended at a gate, kept by "
            "each sweep. Nothing here holds a runner.\n\n")  # fmt: skip
    if waiting:
        room = BODY_CAP_BYTES // 2 + BODY_CAP_BYTES // 4
        rows = [_waiting_row(g, redact) for g in waiting]
        table = summary_fit(WAITING_HEAD, rows, room, lambda n: f"\n{n} more: `zuke runs list "
                            "--status suspended`\n")  # fmt: skip
        head += table
    else:
        head += "Nothing is waiting.\n"
    tail = "\n## Recently finished\n\n"
    if finished:
        rows = [_finished_row(f, redact) for f in finished]
        tail += summary_fit(FINISHED_HEAD, rows, BODY_CAP_BYTES // 5,
                            lambda n: f"\n{n} more: `zuke runs list`\n")  # fmt: skip
    else:
        tail += "None yet.\n"
    return head + tail


def stamp_line(swept_ms: int, job_url: str | None) -> str:
    """The last line: when (and by which job) the body was last written. The marker ends the
    line: a line that starts with an HTML comment would be an HTML block, its link not
    rendered."""
    said = f"Written by the sweep of {when(iso(swept_ms))}"
    if job_url:
        said += f" ({summary_link('its job', job_url)})"
    return f"{said}; later sweeps that found nothing new left it as it is. {STAMP}"


def body(text: str, swept_ms: int, job_url: str | None) -> str:
    return f"{text}\n{stamp_line(swept_ms, job_url)}\n"


def content_of(written: str) -> str:
    """A body as the dashboard wrote it, without its last line (the sweep's date)."""
    trimmed = written.replace("\r\n", "\n").rstrip("\n")
    if not trimmed.endswith(STAMP):
        return written
    return trimmed[: max(trimmed.rfind("\n"), 0)]
