"""The audit trail of MCP tool calls: one ``mcp:<tool>`` event on the run a call concerns.

Each call that names a run (show, run, resume, cancel) appends a
:class:`~zuke.state.records.RunEvent` through :func:`zuke.state.update.update_run`
with the caller's actor, the outcome (``ok``, ``denied``, ``error``) and its
arguments as text, secret values replaced by ``[redacted]``. A run that is not
in the store has no trail to append to; recording never fails the call.

An event leaves the record's ``updatedAt`` as it was: one ``show_run`` of a run
parked at a gate must not reset how long it has been parked.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from zuke._clock import Clock, iso
from zuke._errors import ZukeError
from zuke._redact import MASK, Redactor
from zuke.state._protocol import StateStore
from zuke.state.records import EventOutcome, RunDelta, RunEvent, RunRecord
from zuke.state.update import GaveUp, update_run

#: The longest argument value kept on an event (a signal's data is never kept).
MAX_ARG_CHARS = 200


def arg_text(value: Any) -> str:
    """An argument as the text an event holds: strings as they are, the rest as JSON."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= MAX_ARG_CHARS else text[: MAX_ARG_CHARS - 1] + "…"


def redacted_args(
    args: Mapping[str, Any], redactor: Redactor, secret_params: frozenset[str] = frozenset()
) -> dict[str, str]:
    """``args`` as event text; a secret parameter's value (in ``params``) is never kept."""
    out: dict[str, str] = {}
    for key, value in args.items():
        if value is None:
            continue
        if key == "params" and isinstance(value, Mapping):
            value = {k: MASK if k in secret_params else v for k, v in value.items()}
        out[key] = redactor.text(arg_text(value))
    return out


def record_call(
    store: StateStore,
    run_id: str,
    *,
    tool: str,
    actor: str,
    outcome: EventOutcome,
    args: Mapping[str, str],
    detail: str | None,
    clock: Clock,
    warn: Callable[[str], None],
) -> None:
    """Append the call to ``run_id``'s trail; a missing run or a failing store only warns."""

    def append(record: RunRecord) -> RunDelta:
        event = RunEvent(
            at=iso(clock.now_ms()),
            tool=f"mcp:{tool}",
            actor=actor,
            outcome=outcome,
            args=args,
            detail=detail,
        )
        # A look is not a change: the run's clock (how long it has been parked) stays.
        return RunDelta(updated_at=record.updated_at, events=(event,))

    try:
        written = update_run(store, run_id, append)
    except ZukeError as exc:
        warn(f"zuke mcp: {tool} on run {run_id} was not added to its audit trail ({exc})")
        return
    if isinstance(written, GaveUp):
        warn(f"zuke mcp: {tool} on run {run_id} was not added to its audit trail (conflicts)")
