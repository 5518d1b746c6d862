"""What a run produced: per-target outcomes and the run's verdict."""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Literal

from zuke.state.records import TargetStatus, WaitingFor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # frozen dataclasses without compiling six methods each at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

RunVerdict = Literal["succeeded", "failed", "cancelled", "suspended"]


@dataclass(frozen=True)
class Outcome:
    """How one target ended (record vocabulary), as ``ctx.outcome_of`` reports it."""

    status: TargetStatus
    error: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    duration_ms: float | None = None
    detail: str | None = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class RunResult:
    """The verdict of a run and each planned target's outcome, in plan order."""

    run_id: str
    status: RunVerdict
    outcomes: dict[str, Outcome]
    duration_ms: float = 0.0
    #: whether the run was recorded in a state store
    recorded: bool = False
    #: why the run was stopped early (a lost lock or lease, another process's cancel)
    stop_reason: str | None = None
    #: set when the run's record could not be written: one line saying what was not
    #: recorded and what the record was left as (the CLI prints it and exits 1)
    record_error: str | None = None
    #: a suspended run's gates and what each waits for
    waiting: dict[str, WaitingFor] = field(default_factory=dict)
    #: set when a gate failed or timed out and its declared disposition (``on_failure`` /
    #: ``on_timeout``: ``"cancel-run"``, or a rollback target that succeeded) cancelled the
    #: run: one line saying which gate and what was done
    settled_by: str | None = None

    @property
    def ok(self) -> bool:
        """True for a succeeded or suspended run whose record (if any) was written."""
        return self.status in ("succeeded", "suspended") and self.record_error is None

    @property
    def handled(self) -> bool:
        """The run was cancelled by a gate's declared disposition that did its job (not by an
        operator), and recorded: the command line exits 0 for it, as for ``ok``."""
        return (
            self.status == "cancelled" and self.settled_by is not None and self.record_error is None
        )

    @property
    def failures(self) -> dict[str, Outcome]:
        return {n: o for n, o in self.outcomes.items() if o.status == "failed"}
