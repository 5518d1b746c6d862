"""The fault layer over the store protocol: a write that lands and loses its answer.

What the scheduler already does to every store call — hold it, grant calls in any
order (a *reorder*), let time run up to a second while calls are held (a *slow*
call), cut an actor off, stall it, crash it at a call — is :mod:`tests.sim.world`.
This module adds the fault the issue-25 bugs all came from, as two more moves on
a held **write** (``create_run``, ``put_run``, ``append_run``, ``acquire_lock``,
``renew_lock``, ``release_lock``, ``break_lock``):

* ``lose`` — the write is let through and *lands*; its caller is told the store
  could not answer (:class:`~zuke.state._unsure.UnsureWriteError`, a
  :class:`~zuke.StoreUnavailableError`, what a store raises when its answer was
  lost for good). The caller retries through zuke's own path (the run writer's
  backoff, ``update_run``'s re-read, a heartbeat's next beat) or gives up, as it
  would against a real store;
* ``lose+append`` — the same, and before the caller hears anything **another
  writer appends** to the same run (an MCP audit event: one of the writers that
  need no lease), so the retry meets a third version, not its own.

The budget is per seed (0 to 2 lost answers, from the scenario), the choice is the
scheduler's (seeded, or drawn by Hypothesis), so a seed still replays exactly.
Run writes through the faults are the actors' own: nothing here writes for them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from tests.sim.procs import SimThread
from tests.sim.runtime import Sim
from zuke._clock import iso
from zuke.state._unsure import UnsureWriteError
from zuke.state.records import RunDelta, RunEvent

#: the writes whose answer may be lost
WRITES = frozenset(
    {"create_run", "put_run", "append_run", "acquire_lock", "renew_lock", "release_lock",
     "break_lock"}
)  # fmt: skip
#: writes to a run record: another writer may append to the run before the retry
RUN_WRITES = frozenset({"create_run", "put_run", "append_run"})
#: weight of a lost answer beside 1.0 for a plain grant
LOSS_WEIGHT = 0.02
#: who appends between a lost answer and its retry (an MCP client's audit trail)
AUDITOR = "auditor"


@dataclass(frozen=True)
class LossMove:
    label: str
    weight: float
    act: Callable[[], None]


def _call_of(st: SimThread) -> tuple[str, str]:
    """The store operation and its first argument of a held call (``append_run run-1``)."""
    assert st.park is not None
    words = st.park.label.rsplit("|", 1)[-1].split(" ")
    return words[0], words[1] if len(words) > 1 else ""


class LostAnswers:
    """The lost-answer faults of one seed, over ``inner`` (the store the actors share)."""

    def __init__(
        self,
        sim: Sim,
        inner: Any,
        budget: int,
        orphan: Callable[[str], None] = lambda key: None,
        weight: float = LOSS_WEIGHT,
    ) -> None:
        self.sim = sim
        self.weight = weight
        self.inner = inner
        #: told the key of a claim taken by a lost acquire: its taker never got the token
        self.orphan = orphan
        self.left = budget
        #: (actor, operation) of every answer lost, in order
        self.lost: list[tuple[str, str]] = []
        #: events appended by the second writer
        self.appended = 0

    def moves(self, live: list[SimThread]) -> list[LossMove]:
        if self.left <= 0:
            return []
        moves: list[LossMove] = []
        for st in live:
            op, arg = _call_of(st)
            if op not in WRITES:
                continue
            assert st.park is not None
            label = st.park.label
            moves.append(LossMove(f"lose {label}", self.weight, partial(self._lose, st, None)))
            if op in RUN_WRITES:
                second = partial(self._lose, st, arg)
                moves.append(LossMove(f"lose+append {label}", self.weight, second))
        return moves

    def _lose(self, st: SimThread, append_to: str | None) -> None:
        op, arg = _call_of(st)
        self.left -= 1
        self.lost.append((st.actor.name, op))
        st.lose = partial(self._lost, op, arg, append_to)
        self.sim.grant(st)

    def _lost(self, op: str, arg: str, append_to: str | None) -> BaseException:
        """Called on the caller's thread right after its write landed: the error it sees."""
        if op == "acquire_lock":
            self.orphan(arg)
        if append_to is not None:
            self._append(append_to)
        return UnsureWriteError(f"state: the answer to {op} was lost (sim); it may have landed")

    def _append(self, run_id: str) -> None:
        stored = self.inner.get_run(run_id)
        if stored is None:
            return
        event = RunEvent(at=iso(self.inner.clock.now_ms()), tool="mcp:show_run", actor=AUDITOR,
                         args={"call": str(self.appended + 1)})  # fmt: skip
        # as zuke.mcp.audit appends it: a look is not a change, updatedAt stays
        delta = RunDelta(updated_at=stored.record.updated_at, events=(event,))
        self.inner.append_run(run_id, delta, expected_version=stored.version)
        self.appended += 1
