"""GitHub Actions outputs from any zuke command that moves a run.

Under GitHub Actions (``GITHUB_ACTIONS=true``) ``zuke <target>``, ``zuke resume``,
``zuke resume --check`` and ``zuke cancel`` append what a later step needs to the step's
outputs (``$GITHUB_OUTPUT``: ``run-id``, ``status``, the waiting ``gates``) and a few lines
to the job summary (``$GITHUB_STEP_SUMMARY``), so a workflow reads
``steps.<id>.outputs.run-id`` instead of parsing the console. Outside Actions nothing is
written. A variable that is unset is skipped; a file that cannot be written is one warning
line on stderr, and the command's own exit code stands. ``ZUKE_GITHUB_OUTPUTS=off`` turns it
off (the action's sweep step renders its own outputs from the JSON report).

Values go out in GitHub's multi-line form (``name<<DELIMITER``), so no value can forge another
output; every text passes the command's redactor. Only ids, statuses, gate and target names,
triggers and deadlines are written: never a parameter's value. In the summary every name,
error and reason is escaped (:mod:`zuke._inert`: it renders as itself — no tag, link, image,
emphasis or table break) and no link is made; a step's summary stays under
:data:`~zuke._inert.SUMMARY_CAP_BYTES` (a sweep's rows stop with ``N more: `zuke runs
list```), since GitHub drops a summary over 1 MiB whole.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from zuke._inert import (
    SUMMARY_CAP_BYTES,
    summary_code,
    summary_code_block,
    summary_fit,
    summary_text,
)
from zuke.cli.hints import resume_commands

if TYPE_CHECKING:
    from zuke._engine.result import RunResult
    from zuke.runs.cancel import CancelResult
    from zuke.runs.outcome import ResumeOutcome
    from zuke.runs.sweep_report import SweepReport
    from zuke.state.records import WaitingFor

OFF = ("0", "off", "false", "no")
#: how much of a failed target's error the summary shows
_ERROR_CHARS = 300


@dataclass(frozen=True)
class Report:
    """What one command leaves for the workflow: step outputs and a job-summary block (its
    ``summary``, then one of ``rows`` per run, left out from the end when the step's summary
    would pass the cap)."""

    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""
    rows: tuple[str, ...] = ()


def enabled(env: Mapping[str, str]) -> bool:
    """Under GitHub Actions, unless ``ZUKE_GITHUB_OUTPUTS`` says off."""
    if env.get("GITHUB_ACTIONS") != "true":
        return False
    return env.get("ZUKE_GITHUB_OUTPUTS", "").strip().lower() not in OFF


def output_text(values: Mapping[str, str]) -> str:
    """``$GITHUB_OUTPUT`` lines in the multi-line form, a fresh delimiter per value that
    appears in no value (as actions/toolkit's ``ghadelimiter_<uuid>``; docs.github.com:
    "workflow commands for GitHub Actions", Multiline strings)."""
    parts = []
    for name, value in values.items():
        import uuid  # here: uuid loads platform, which no command needs off Actions

        delimiter = f"ghadelimiter_{uuid.uuid4()}"
        while delimiter in value or delimiter in name:  # pragma: no cover - a uuid4 collision
            delimiter = f"ghadelimiter_{uuid.uuid4()}"
        parts.append(f"{name}<<{delimiter}\n{value}\n{delimiter}\n")
    return "".join(parts)


def _waiting_json(waiting: Mapping[str, WaitingFor]) -> str:
    return json.dumps(
        [
            {"gate": gate, "trigger": why.trigger, "deadline": why.deadline}
            for gate, why in waiting.items()
        ],
        separators=(",", ":"),
    )


def _run_outputs(
    run_id: str, status: str, waiting: Mapping[str, WaitingFor] | None
) -> dict[str, str]:
    values = {"run-id": run_id, "status": status}
    if waiting is not None:  # unknown (a signal only delivered): left out, never empty
        values["gates"] = ",".join(waiting)
        values["waiting"] = _waiting_json(waiting)
    return values


Redact = Callable[[str], str]


@dataclass(frozen=True)
class _Markdown:
    """Summary text from values: each is redacted first (a secret is found as it was
    written, before escaping could change how it is spelled), then escaped."""

    redact: Redact

    def text(self, value: str, limit: int | None = None) -> str:
        return summary_text(self.redact(value), limit=limit)

    def code(self, value: str, *, cell: bool = False) -> str:
        return summary_code(self.redact(value), cell=cell)


def _run_summary(head: str, result: RunResult, md: _Markdown) -> list[str]:
    lines = [f"### zuke: {head} {md.text(result.status)}", ""]
    if result.waiting:
        gates = ", ".join(md.code(g) for g in result.waiting)
        lines += [f"Waiting at {gates}. To move it on:", ""]
        commands = [md.redact(line.strip())
                    for line in resume_commands(result.run_id, result.waiting)]  # fmt: skip
        lines += [*summary_code_block(commands), ""]
    for name, outcome in result.failures.items():
        error = md.text(" ".join((outcome.error or "failed").split()), limit=_ERROR_CHARS)
        lines.append(f"- {md.code(name)} failed: {error}")
    if result.stop_reason:
        lines.append(f"- stopped: {md.text(result.stop_reason, limit=_ERROR_CHARS)}")
    return lines


def run_report(result: RunResult, build: str, redact: Redact = str) -> Report:
    """``zuke <target>``: the run's id, its verdict, where it waits."""
    md = _Markdown(redact)
    outputs = _run_outputs(result.run_id, result.status, result.waiting)
    summary = _run_summary(f"{md.text(build)} run {md.code(result.run_id)}", result, md)
    return Report(outputs, "\n".join(summary).rstrip() + "\n")


def resume_report(outcome: ResumeOutcome, build: str, redact: Redact = str) -> Report:
    """``zuke resume RUN``: the continued run's verdict, or what the delivery left."""
    md = _Markdown(redact)
    result = outcome.result
    if result is None:  # stored only: the run is someone else's to continue
        outputs = _run_outputs(outcome.run_id, outcome.status, None)
        outputs["action"] = outcome.action
        head = f"### zuke: {md.text(build)} run {md.code(outcome.run_id)} {outcome.action}"
        return Report(outputs, f"{head} ({md.text(outcome.status)})\n")
    outputs = _run_outputs(result.run_id, result.status, result.waiting)
    outputs["action"] = outcome.action
    head = f"{md.text(build)} run {md.code(result.run_id)} {outcome.action},"
    summary = _run_summary(head, result, md)
    return Report(outputs, "\n".join(summary).rstrip() + "\n")


def sweep_report(report: SweepReport, run_id: str | None, redact: Redact = str) -> Report:
    """``zuke resume --check``: the counts (the action's output names), each run's row, and
    for a sweep of one run its id, status and waiting gate."""
    md = _Markdown(redact)
    counts = report.counts()
    outputs = {name.replace("_", "-"): str(n) for name, n in counts.items()}
    listed = [
        {"id": e.run_id, "gate": e.gate, "action": e.action, "result": e.result}
        for e in report.entries
    ]
    outputs["runs"] = json.dumps(listed, separators=(",", ":"))
    if run_id is not None:
        mine = [e for e in report.entries if e.run_id == run_id]
        if mine:
            outputs["run-id"] = run_id
            outputs["status"] = mine[-1].result
            outputs["gates"] = ",".join(
                e.gate for e in mine if e.action == "still-waiting" and e.gate
            )
    head = ", ".join(f"{n} {name.replace('_', '-')}" for name, n in counts.items())
    lines = ["### zuke sweep", "", head, ""]
    if not report.entries:
        return Report(outputs, "\n".join([*lines, "No runs to check."]) + "\n")
    lines += ["| Run | Build | Gate | Action | Result |", "|---|---|---|---|---|"]
    rows: list[str] = []
    for e in report.entries:
        gate = md.code(e.gate, cell=True) if e.gate else "—"
        cells = [md.code(e.run_id, cell=True), md.text(e.build), gate, e.action,
                 md.text(e.result, limit=_ERROR_CHARS)]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |\n")
    return Report(outputs, "\n".join(lines) + "\n", tuple(rows))


def cancel_report(result: CancelResult, redact: Redact = str) -> Report:
    """``zuke cancel RUN``: the run's status afterwards."""
    md = _Markdown(redact)
    outputs = {"run-id": result.run_id, "status": result.status}
    said = md.text(result.summary())
    return Report(outputs, f"### zuke: cancel {md.code(result.run_id)}\n\n{said}\n")


def _more(n: int) -> str:
    """The line that ends a summary cut short (after a blank line: a table's end)."""
    return f"\n{n} more: `zuke runs list`\n"


def _summary_room(path: str) -> int:
    """What a step's summary file can still take under the cap."""
    try:
        used = Path(path).stat().st_size
    except OSError:
        used = 0
    return SUMMARY_CAP_BYTES - used


def publish(
    report: Report,
    env: Mapping[str, str],
    err: TextIO,
    redact: Redact = str,
) -> None:
    """Append ``report`` to the step's outputs and the job summary, when under Actions
    (``redact``: the run's redactor, which the report's builder applied to each value too)."""
    if not enabled(env):
        return
    summary = ""
    if report.summary and env.get("GITHUB_STEP_SUMMARY"):
        rows = [redact(row) for row in report.rows]
        room = _summary_room(env["GITHUB_STEP_SUMMARY"])
        summary = summary_fit(redact(report.summary), rows, room - 1, _more)
        summary += "\n" if summary else ""
    writes = {
        "GITHUB_OUTPUT": output_text({k: redact(v) for k, v in report.outputs.items()}),
        "GITHUB_STEP_SUMMARY": summary,
    }
    failed = []
    for variable, text in writes.items():
        path = env.get(variable, "")
        if not path or not text:
            continue
        try:
            with Path(path).open("a", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:
            failed.append(f"{variable} ({exc.strerror or type(exc).__name__})")
    if failed:
        err.write(f"zuke: warning: could not write {' and '.join(failed)}; the run is unaffected\n")
        err.flush()


__all__ = [
    "Report",
    "cancel_report",
    "enabled",
    "output_text",
    "publish",
    "resume_report",
    "run_report",
    "sweep_report",
]
