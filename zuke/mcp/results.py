"""The JSON a ``zuke mcp`` tool returns for a run's verdict, a resume and a cancel.

Apart so the shapes a client reads are in one place, beside no behaviour: every value is
JSON (lists, not tuples), keys camelCase as in the record's wire form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zuke._redact import Redactor

if TYPE_CHECKING:
    from zuke._engine.result import RunResult
    from zuke.runs.cancel import CancelResult
    from zuke.runs.outcome import ResumeOutcome


def result_json(result: RunResult, redactor: Redactor | None = None) -> dict[str, Any]:
    """A run's verdict, per-target outcomes and gates, as a tool returns it."""
    payload = {
        "runId": result.run_id,
        "status": result.status,
        "ok": result.ok,
        "recorded": result.recorded,
        "durationMs": round(result.duration_ms, 1),
        "outcomes": {
            name: {"status": o.status, "error": o.error, "durationMs": o.duration_ms}
            for name, o in result.outcomes.items()
        },
        "waiting": {
            name: {"trigger": w.trigger, "deadline": w.deadline, "onTimeout": w.on_timeout}
            for name, w in result.waiting.items()
        },
        "stopReason": result.stop_reason,
        "recordError": result.record_error,
    }
    return payload if redactor is None else redactor.json(payload)


def resume_json(outcome: ResumeOutcome) -> dict[str, Any]:
    """What ``resume_run`` returns: what the resume did, and the continued run's verdict."""
    return {
        "runId": outcome.run_id,
        "action": outcome.action,
        "status": outcome.status,
        "ok": outcome.ok,
        "notes": list(outcome.notes),
        "result": None if outcome.result is None else result_json(outcome.result),
    }


def cancel_json(result: CancelResult) -> dict[str, Any]:
    """What ``cancel_run`` returns: the run's status, what was given back, what went wrong."""
    return {
        "runId": result.run_id,
        "status": result.status,
        "noop": result.noop,
        "owner": result.owner,
        "released": list(result.released),
        "left": list(result.left),
        "warnings": list(result.warnings),
        "compensated": list(result.compensated),
        "failures": list(result.failures),
        "notes": list(result.notes),
        "summary": result.summary(),
    }
