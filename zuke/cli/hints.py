"""The exact commands that move a run on, shown wherever a suspended run is shown."""

from __future__ import annotations

from collections.abc import Mapping

from zuke.state.records import WaitingFor


def resume_commands(run_id: str, waiting: Mapping[str, WaitingFor]) -> list[str]:
    """One block per gate the run waits at: what it waits for, until when, and how to resume."""
    lines = []
    for gate, why in waiting.items():
        until = f" until {why.deadline}" if why.deadline else ""
        timeout = why.on_timeout if not why.on_timeout_is_target else f"run {why.on_timeout}"
        then = f", then {timeout}" if why.deadline else ""
        lines.append(f"  # {gate} waits for {why.trigger}{until}{then}")
        if why.trigger.startswith("signal:"):
            name = why.trigger.removeprefix("signal:")
            lines.append(f"  zuke resume {run_id} --signal {name} --data '{{}}'")
    lines.append(f"  zuke resume --check {run_id}   # re-check its gates (predicates, timeouts)")
    return lines
