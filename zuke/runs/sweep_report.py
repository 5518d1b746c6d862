"""What a sweep did, run by run: the report ``zuke resume --check`` prints and ``--json`` shows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from zuke._errors import RunNotFoundError
from zuke.state._protocol import RunQuery, StateStore
from zuke.state.records import RunStatus

if TYPE_CHECKING:
    from zuke.runs.gate_checks import GateAnswer

SweepAction = Literal[
    "resumed",
    "still-waiting",
    "timed-out",
    "gate-failed",
    "failed",
    "reaped",
    "skipped-foreign",
    "skipped-held",
    "left-alone",
    "deferred",
    "not-checked",
]


@dataclass(frozen=True)
class SweepEntry:
    """What the sweep did with one run."""

    run_id: str
    build: str
    action: SweepAction
    #: the run's status afterwards (or the error, for a run that failed to be checked)
    result: str
    gate: str | None = None
    detail: str | None = None
    #: a check raised (a predicate's error): shown and counted, the gate stays waiting
    errored: bool = False
    #: false when no gate of the run was asked this sweep (each inside its ``interval``)
    rechecked: bool = True
    #: then, when its gate was last asked (ISO): ``detail`` is that check's answer
    last_checked: str | None = None
    #: ``failed`` because the state store could not be used: the run is left as it was
    store_failed: bool = False
    #: ``failed`` because a gate's service refused this sweep's credentials (a token GitHub
    #: refuses): the run is left waiting as it was
    access_failed: bool = False
    #: ``timed-out`` / ``gate-failed``: the gate's declared disposition handled it (the run
    #: cancelled, rolled back) — not a failure of the sweep
    handled: bool = False


@dataclass(frozen=True)
class SweepReport:
    entries: list[SweepEntry] = field(default_factory=list)

    def count(self, action: SweepAction) -> int:
        return sum(e.action == action for e in self.entries)

    @property
    def checked(self) -> int:
        """Suspended runs looked at (reaping aside)."""
        return sum(e.action not in ("reaped", "left-alone", "not-checked") for e in self.entries)

    @property
    def failed(self) -> int:
        """Runs that failed, were settled failed by reaping, were degraded, or could not be
        checked; and gates that failed or timed out with no disposition that handled them
        (one rule: a ``/deny``, a failed workflow and a timeout alike — a declared
        ``"cancel-run"`` or rollback that did its job is no failure, ``"fail"`` is)."""
        return sum(
            e.action == "failed"
            or (e.action in ("timed-out", "gate-failed") and not e.handled)
            or (e.action in ("resumed", "reaped") and e.result == "failed")
            for e in self.entries
        )

    @property
    def ok(self) -> bool:
        """No run failed, and none was left unchecked (a build that cannot load)."""
        return self.failed == 0 and self.count("not-checked") == 0

    @property
    def access_failures(self) -> list[SweepEntry]:
        """The runs whose gates' services refused this sweep's credentials."""
        return [e for e in self.entries if e.access_failed]

    @property
    def store_failures(self) -> int:
        """Runs the sweep could not check or continue because the state store failed."""
        return sum(e.store_failed for e in self.entries)

    def as_json(self) -> dict[str, Any]:
        """The machine-readable summary (``zuke resume --check --json``, MCP ``resume_check``)."""
        runs = [
            {
                "id": e.run_id,
                "build": e.build,
                "gate": e.gate,
                "action": e.action,
                "result": e.result,
                "detail": e.detail,
                "error": e.errored,
                "rechecked": e.rechecked,
                "handled": e.handled,
                "last_checked": e.last_checked,
            }
            for e in self.entries
        ]
        return {"runs": runs, "counts": self.counts(), "ok": self.ok}

    def counts(self) -> dict[str, int]:
        return {
            "checked": self.checked,
            "resumed": self.count("resumed"),
            "still_waiting": self.count("still-waiting"),
            "timed_out": self.count("timed-out"),
            "gate_failed": self.count("gate-failed"),
            "deferred": self.count("deferred"),
            "failed": self.failed,
            "reaped": self.count("reaped"),
            "skipped": self.count("skipped-foreign") + self.count("skipped-held"),
            "not_checked": self.count("not-checked"),
            "errors": sum(e.errored for e in self.entries),
        }


def spell_interval(ms: int) -> str:
    """``600000`` as ``10m``, ``5400000`` as ``1h30m``: the duration grammar's own spelling."""
    parts, rest = [], ms
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    if rest or not parts:
        parts.append(f"{rest}ms")
    return "".join(parts)


def last_checked(check: GateAnswer) -> str | None:
    """When a gate's trigger was last asked (its row's ``checked_at``)."""
    waiting = check.row.waiting_for
    return waiting.checked_at if waiting is not None else None


def check_detail(check: GateAnswer) -> str | None:
    """What one gate's check says: its answer now, or — not asked, inside its ``interval`` —
    ``not re-checked (interval 10m; last checked …)`` and the last answer, marked as such."""
    if check.due:
        return check.detail
    note = f"not re-checked (interval {spell_interval(check.interval_ms)}"
    note += f"; last checked {last_checked(check) or 'never'})"
    return f"{note}; its last answer: {check.detail}" if check.detail else note


_UNSETTLED: tuple[RunStatus, ...] = ("running", "cancelling", "suspended")


def unchecked_report(store: StateStore, run_id: str | None, reason: str) -> SweepReport:
    """The sweep's report when the build cannot load: each run a sweep would look at (every
    running, cancelling or suspended run in the store, or just ``run_id``), not checked,
    with ``reason``. Nothing is read beyond the listing and nothing is written."""
    if run_id is not None:
        found = store.get_run(run_id)
        if found is None:
            raise RunNotFoundError(f'resume --check: no run "{run_id}" in the store', run_id=run_id)
        runs = [(run_id, found.record.build, found.record.status)]
    else:
        runs = [
            (s.id, s.build, s.status)
            for status in _UNSETTLED
            for s in store.list_runs(RunQuery(status=status))
        ]
    return SweepReport(
        [
            SweepEntry(rid, build, "not-checked", status, detail=reason)
            for rid, build, status in runs
            if status in _UNSETTLED
        ]
    )


__all__ = ["SweepAction", "SweepEntry", "SweepReport", "unchecked_report"]
