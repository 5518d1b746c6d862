"""Late and lost answers to the run writer's writes (issue 25 §1, §7): found by the simulation.

A write answered past the run's lease's stop point proves nothing.

Found by the simulation once its fault layer answered a lost write by its witness, as
the Postgres store does (seed 371): the owner's ``running`` transition went out, its
answer was lost, and the owner paused while the retry was out; a sweep reaped the run
and ran ``deploy`` to its end; the retry was answered ``Written`` — the first write had
landed — and the owner ran ``deploy`` a second time on its strength, its lease long
lapsed (its heartbeat had not run yet to say so). The same holds for any answer that
comes late. The owner now stops instead: nothing more is done on that answer.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import Harness
from zuke import Build, target
from zuke._clock import ManualClock, SystemClock
from zuke._target import TargetBuilder
from zuke.state._protocol import Written
from zuke.state._unsure import UnsureWriteError, UnsureWrites
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunEvent

TTL_MS = 60_000


class LateAnswers:
    """The memory store, whose answer to the ``running`` write of ``deploy`` comes past the
    lease's TTL (the caller paused while the write was out)."""

    def __init__(self, inner: MemoryStateStore, clock: ManualClock) -> None:
        self.inner = inner
        self.clock = clock
        self.late = True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def append_run(self, run_id: str, delta: Any, *, expected_version: str) -> Any:
        written = self.inner.append_run(run_id, delta, expected_version=expected_version)
        self._pause_if_running(delta.targets or {})
        return written

    def put_run(self, record: Any, *, expected_version: str) -> Any:
        written = self.inner.put_run(record, expected_version=expected_version)
        self._pause_if_running(record.targets)
        return written

    def _pause_if_running(self, rows: Any) -> None:
        row = rows.get("deploy")
        if self.late and row is not None and row.status == "running":
            self.late = False
            self.clock.advance(TTL_MS + 1_000)  # the answer arrives after the pause


def test_a_transition_answered_past_the_leases_stop_point_runs_no_body(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = ManualClock()
    # the lease's renewals read the system clock: here it is the manual one
    monkeypatch.setattr(SystemClock, "now_ms", lambda self: clock.now_ms())
    store = LateAnswers(MemoryStateStore(clock=clock), clock)
    ran: list[str] = []

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: ran.append("deploy"))

    build = type("LateBuild", (Build,), {"deploy": target(deploy),
                                          "state_store": lambda self: store})  # fmt: skip
    h = Harness(build, store, clock, env={"ZUKE_RUN_LEASE_TTL": f"{TTL_MS}ms"})
    result = h.start("deploy")
    assert ran == []
    assert result.status != "succeeded"
    assert result.status == "failed"
    assert "its lease lapsed while this process was paused" in (result.stop_reason or "")
    assert h.store.get_run(result.run_id) is not None


class LostAfterConflict:
    """The memory store as a store that retries sees it (the Postgres store's witness, with
    zuke's own :class:`UnsureWrites`): the ``running`` write of ``deploy`` first meets
    another writer's append (a conflict), then — re-read and sent again — lands and its
    answer is lost. The same write sent again is answered by its witness."""

    def __init__(self, inner: MemoryStateStore) -> None:
        self.inner = inner
        self.unsure: UnsureWrites[str] = UnsureWrites()
        self.landed: list[Any] = []
        self.step = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def append_run(self, run_id: str, delta: Any, *, expected_version: str) -> Any:
        known = self.unsure.key(run_id, expected_version, delta)
        if known is not None:
            return Written(version=known)  # it landed: the witness says so
        row = (delta.targets or {}).get("deploy")
        ours = row is not None and row.status == "running"
        if ours and self.step == 0:  # another writer (an MCP audit event) gets there first
            self.step = 1
            stored = self.inner.get_run(run_id)
            assert stored is not None
            event = RunEvent(at=stored.record.updated_at, tool="mcp:show_run", actor="ops")
            other = RunDelta(updated_at=stored.record.updated_at, events=(event,))
            self.inner.append_run(run_id, other, expected_version=stored.version)
        written = self.inner.append_run(run_id, delta, expected_version=expected_version)
        if ours and isinstance(written, Written):
            self.landed.append(delta)
            if self.step == 1:  # re-read after the conflict, sent again: lands, answer lost
                self.step = 2
                self.unsure.note(run_id, expected_version, delta, written.version)
                raise UnsureWriteError("state: the answer to append_run was lost")
        return written


def test_a_write_whose_answer_was_lost_after_a_conflict_is_not_applied_twice() -> None:
    """Found by the simulation (seed 435, ``append-once``): the writer's retry went against
    the record it knew before the conflict, met its own landed write as a conflict, re-read
    and applied the change a second time (the store's witness is keyed by the version the
    lost write was sent against). It now retries against that version: the witness answers."""
    clock = ManualClock()
    store = LostAfterConflict(MemoryStateStore(clock=clock))
    ran: list[str] = []

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: ran.append("deploy"))

    build = type("LostBuild", (Build,), {"deploy": target(deploy),
                                          "state_store": lambda self: store})  # fmt: skip
    result = Harness(build, store, clock).start("deploy")
    assert store.step == 2, "the lost answer was not reached"
    assert (result.status, ran) == ("succeeded", ["deploy"])
    assert len(store.landed) == 1, "the running transition landed twice"
