"""What GitHub's Deployments should show for a run: one wanted status per environment.

A pure function of the run record (issue 26 §3), so any process — the run's own, a sweep, a
canceller — wants the same thing and the reporter only sends the difference from what it
last sent. Per target that names an environment:

==================================  =====================================================
the run / the target                the deployment's status
==================================  =====================================================
run cancelled (a rollback too)      ``inactive`` ("cancelled: …" / "rolled back: …")
target running                      ``in_progress``
target succeeded                    ``success``
target failed                       ``failure`` (``error`` if stopped mid-way)
target skipped, or never reached    ``error`` ("not reached: …")
run suspended, a gate before it     ``pending`` ("waiting at approve since … for …")
otherwise (created, not started)    ``queued``
==================================  =====================================================

A description is at most 140 characters (GitHub refuses longer: "description ... Maximum
length 140", docs.github.com/rest/deployments/statuses), with the run's secrets masked and
control and bidi characters escaped (:func:`zuke._inert.console_text`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from zuke._inert import console_text
from zuke.state.records import RunRecord, TargetRecord

#: "A short description of the status. Maximum length 140 characters" (GitHub's REST docs)
DESCRIPTION_LIMIT = 140


@dataclass(frozen=True)
class Wanted:
    """The status one environment's deployment should show."""

    environment: str
    target: str
    state: str
    description: str
    environment_url: str | None


def fit(text: str, redact: Callable[[str], str]) -> str:
    """``text`` redacted, made inert and cut to GitHub's 140 characters (with an ellipsis)."""
    plain = console_text(redact(text), tabs=False)
    return plain if len(plain) <= DESCRIPTION_LIMIT else plain[: DESCRIPTION_LIMIT - 1] + "…"


def _before(record: RunRecord, target: str) -> list[str]:
    """The targets ``target`` depends on, however far back (the record's graph)."""
    deps = {node.name: node.depends_on for node in record.graph}
    seen: list[str] = []
    stack = list(deps.get(target, ()))
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.append(name)
            stack.extend(deps.get(name, ()))
    return seen


def _gate_line(name: str, row: TargetRecord) -> str:
    why = row.waiting_for
    what = (why.detail if why and why.detail else None) or (f"{why.trigger}" if why else "a gate")
    what = what.removeprefix("waiting for ")
    since = f" since {row.started_at[:16].replace('T', ' ')} UTC" if row.started_at else ""
    return f"waiting at {name}{since} for {what}"  # "since" first: a long "what" is cut


def _one(record: RunRecord, name: str, row: TargetRecord) -> tuple[str, str]:
    if record.status == "cancelled":
        rolled = any(e.tool in ("timeout", "wait-failed") for e in record.events)
        return "inactive", ("rolled back" if rolled else "cancelled") + f": run {record.id}"
    if row.status == "running":
        return "in_progress", f"{name} is deploying (run {record.id})"
    if row.status == "succeeded":
        return "success", f"{name} deployed (run {record.id})"
    if row.status == "failed":
        state = "error" if row.interrupted else "failure"
        return state, f"{name} failed: {(row.error or 'no reason given').splitlines()[0]}"
    if row.status == "skipped" or record.status in ("failed", "succeeded"):
        reason = row.error or f"the run {record.status} before it"
        return "error", f"not reached: {reason.splitlines()[0]}"
    if record.status == "suspended":
        for gate in _before(record, name):
            waiting = record.targets.get(gate)
            if waiting is not None and waiting.status == "waiting":
                return "pending", _gate_line(gate, waiting)
    return "queued", f"queued: run {record.id}"


def wanted(record: RunRecord, redact: Callable[[str], str]) -> list[Wanted]:
    """The status each environment of ``record`` should show now, in the record's order (an
    environment two targets name: the later target's)."""
    out: dict[str, Wanted] = {}
    for name, row in record.targets.items():
        if row.environment is None:
            continue
        state, text = _one(record, name, row)
        out[row.environment] = Wanted(row.environment, name, state, fit(text, redact),
                                      row.environment_url)  # fmt: skip
    return list(out.values())


def environments(record: RunRecord) -> Mapping[str, str]:
    """Each environment the run deploys to, and the target that deploys it."""
    return {row.environment: name for name, row in record.targets.items() if row.environment}


__all__ = ["DESCRIPTION_LIMIT", "Wanted", "environments", "fit", "wanted"]
