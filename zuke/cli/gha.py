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
triggers and deadlines are written: never a parameter's value.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from zuke.cli.hints import resume_commands

if TYPE_CHECKING:
    from zuke._engine.result import RunResult
    from zuke.runs.cancel import CancelResult
    from zuke.runs.lifecycle import ResumeOutcome
    from zuke.runs.sweep_report import SweepReport
    from zuke.state.records import WaitingFor

OFF = ("0", "off", "false", "no")
#: how much of a failed target's error the summary shows
_ERROR_CHARS = 300


@dataclass(frozen=True)
class Report:
    """What one command leaves for the workflow: step outputs and a job-summary block."""

    outputs: dict[str, str] = field(default_factory=dict)
    summary: str = ""


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


def _code(text: str) -> str:
    return "`" + text.replace("`", "'") + "`"


def _run_summary(head: str, result: RunResult) -> list[str]:
    lines = [f"### zuke: {head} {result.status}", ""]
    if result.waiting:
        gates = ", ".join(_code(g) for g in result.waiting)
        lines += [f"Waiting at {gates}. To move it on:", "", "```"]
        lines += [line.strip() for line in resume_commands(result.run_id, result.waiting)]
        lines += ["```", ""]
    for name, outcome in result.failures.items():
        error = " ".join((outcome.error or "failed").split())[:_ERROR_CHARS]
        lines.append(f"- {_code(name)} failed: {error}")
    if result.stop_reason:
        lines.append(f"- stopped: {result.stop_reason}")
    return lines


def run_report(result: RunResult, build: str) -> Report:
    """``zuke <target>``: the run's id, its verdict, where it waits."""
    outputs = _run_outputs(result.run_id, result.status, result.waiting)
    summary = _run_summary(f"{build} run {_code(result.run_id)}", result)
    return Report(outputs, "\n".join(summary).rstrip() + "\n")


def resume_report(outcome: ResumeOutcome, build: str) -> Report:
    """``zuke resume RUN``: the continued run's verdict, or what the delivery left."""
    result = outcome.result
    if result is None:  # stored only: the run is someone else's to continue
        outputs = _run_outputs(outcome.run_id, outcome.status, None)
        outputs["action"] = outcome.action
        head = f"### zuke: {build} run {_code(outcome.run_id)} {outcome.action}"
        return Report(outputs, f"{head} ({outcome.status})\n")
    outputs = _run_outputs(result.run_id, result.status, result.waiting)
    outputs["action"] = outcome.action
    summary = _run_summary(f"{build} run {_code(result.run_id)} {outcome.action},", result)
    return Report(outputs, "\n".join(summary).rstrip() + "\n")


def sweep_report(report: SweepReport, run_id: str | None) -> Report:
    """``zuke resume --check``: the counts (the action's output names), each run's row, and
    for a sweep of one run its id, status and waiting gate."""
    counts = report.counts()
    outputs = {name.replace("_", "-"): str(n) for name, n in counts.items()}
    rows = [
        {"id": e.run_id, "gate": e.gate, "action": e.action, "result": e.result}
        for e in report.entries
    ]
    outputs["runs"] = json.dumps(rows, separators=(",", ":"))
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
    if report.entries:
        lines += ["| Run | Build | Gate | Action | Result |", "|---|---|---|---|---|"]
        for e in report.entries:
            cells = [_code(e.run_id), e.build, e.gate or "—", e.action, e.result]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    else:
        lines.append("No runs to check.")
    return Report(outputs, "\n".join(lines) + "\n")


def cancel_report(result: CancelResult) -> Report:
    """``zuke cancel RUN``: the run's status afterwards."""
    outputs = {"run-id": result.run_id, "status": result.status}
    return Report(outputs, f"### zuke: cancel {_code(result.run_id)}\n\n{result.summary()}\n")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def publish(
    report: Report,
    env: Mapping[str, str],
    err: TextIO,
    redact: Callable[[str], str] = str,
) -> None:
    """Append ``report`` to the step's outputs and the job summary, when under Actions."""
    if not enabled(env):
        return
    writes = {
        "GITHUB_OUTPUT": output_text({k: redact(v) for k, v in report.outputs.items()}),
        "GITHUB_STEP_SUMMARY": redact(report.summary) + "\n" if report.summary else "",
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
