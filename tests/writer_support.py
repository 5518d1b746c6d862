"""What the lazy-record tests of every store share (tests/engine/test_writer_lazy_record.py,
tests/state/test_postgres_lazy_record.py)."""

from __future__ import annotations

import pytest

from zuke._clock import Clock
from zuke._engine import record_writes
from zuke._engine.observer import Transition
from zuke._engine.writer import RunStateWriter
from zuke.state import records, update
from zuke.state.records import RunDelta, RunRecord


def count_record_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every time the writer or ``update_run`` applies deltas to a record, how many: the
    list fills as they do (empty while the record is kept lazily)."""
    applied: list[int] = []
    real = records.apply_deltas

    def counted(base: RunRecord, deltas: list[RunDelta]) -> RunRecord:
        applied.append(len(deltas))
        return real(base, deltas)

    monkeypatch.setattr(record_writes, "apply_deltas", counted)
    monkeypatch.setattr(record_writes, "apply_delta", lambda b, d: counted(b, [d]))
    monkeypatch.setattr(update, "apply_delta", lambda b, d: counted(b, [d]))
    return applied


async def chain(writer: RunStateWriter, names: list[str], clock: Clock) -> None:
    """Each target in turn running, then succeeded: a chain's transitions, one writer."""
    for name in names:
        await writer.transition(Transition(name, "running", clock.now_ms()))
        await writer.transition(Transition(name, "succeeded", clock.now_ms()))
