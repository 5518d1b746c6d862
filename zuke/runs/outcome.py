"""What a resume did (``ResumeOutcome``), and the one rule for its exit code.

Apart from :mod:`zuke.runs.lifecycle` (how a run is held and moved) because every
command that moves a run from outside — a resume, a sweep's timeout or failed gate, the
public ``zuke.resume_run`` and MCP's ``resume_run`` — answers with this value, and its
``ok`` is the exit code's rule whoever prints it.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Literal

from zuke._engine.result import RunResult

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

ResumeAction = Literal["resumed", "timed-out", "gate-failed", "already-delivered", "delivered"]


@dataclass(frozen=True)
class ResumeOutcome:
    """What a resume did. ``result`` is the continued run's, when it ran.

    ``delivered``: the signal is stored, and the run is someone else's to continue
    (a live owner, another resumer, or the next sweep).
    """

    run_id: str
    action: ResumeAction
    status: str
    result: RunResult | None = None
    notes: list[str] = field(default_factory=list)
    #: a gate that failed or timed out (``gate-failed``, ``timed-out``) was handled by its
    #: declared disposition: ``"cancel-run"`` cancelled the run, or its rollback target
    #: succeeded and the run was cancelled (``"fail"``, or a disposition that could not do
    #: its job, is not handled)
    handled: bool = False

    @property
    def ok(self) -> bool:
        """The one rule for the exit code: a gate failure or timeout handled by its declared
        disposition is ok (exit 0) whatever it came from; one with none (``"fail"``) is not."""
        if self.action in ("already-delivered", "delivered"):
            return True
        if self.action in ("timed-out", "gate-failed"):
            lost = self.result is not None and self.result.record_error is not None
            return self.handled and not lost
        return self.result is not None and (self.result.ok or self.result.handled)


__all__ = ["ResumeAction", "ResumeOutcome"]
