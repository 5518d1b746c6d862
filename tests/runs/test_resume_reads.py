"""A signalled resume reads the run no more often than its decisions need (issue 28 §3).

``zuke resume RUN --signal NAME`` is a whole process per signal, each read a
round trip to the store: the delivery is decided on the read that checked the
run (a compare-and-swap on its version, not a second read), whether the run is
free and due is one read, and the first write under the lease is decided on
the record read under it. A record that moved in between still never lands
stale: the compare-and-swap conflicts and the change is decided again on a
fresh read — which these tests pin as well.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from tests.runs.support import Harness, RecordingStore, release_build
from zuke._clock import ManualClock
from zuke._redact import Redactor
from zuke.runs.lifecycle import take
from zuke.runs.signals import SignalDelivery, store_signal
from zuke.state._protocol import StateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord
from zuke.state.update import Updated, update_run


class ReadsToo(RecordingStore):
    """:class:`RecordingStore` that logs every read of a record as well."""

    def get_run(self, run_id: str) -> Any:
        self.calls.append(("read", run_id))
        return self.inner.get_run(run_id)


def parked() -> tuple[Harness, ReadsToo, str]:
    clock = ManualClock()
    store = ReadsToo(MemoryStateStore(clock=clock))
    h = Harness(release_build(cast(StateStore, store), []), cast(StateStore, store), clock)
    run_id = h.start().run_id
    assert run_id is not None and h.record(run_id).status == "suspended"
    store.calls.clear()
    return h, store, run_id


def note(run: RunRecord, text: str) -> RunDelta:
    """An append that moves nothing (what another process's audit or signal write is)."""
    return RunDelta(updated_at=run.updated_at,
                    events=(RunEvent(at=run.updated_at, tool=text, actor="other"),))  # fmt: skip


def test_a_signalled_resume_reads_the_run_once_per_decision_before_it_moves() -> None:
    h, store, run_id = parked()
    outcome = h.resume(run_id, "approved")
    assert outcome.action == "resumed" and outcome.status == "succeeded"
    kinds = [kind if kind != "write" else f"write:{what}" for kind, what in store.calls]
    until_moved = kinds[: kinds.index("write:running") + 1]
    assert until_moved == [
        "read",  # the run: exists, this build's, a gate waits for the signal
        "write:-",  # the signal appended, decided on that read
        "read",  # free (not running) and due: one read
        "acquire",  # the lease
        "read",  # the record under the lease (a read before it decides nothing)
        "write:running",  # suspended → running, decided on the read under the lease
    ]


def test_a_signal_decided_on_a_record_that_moved_is_decided_again_and_lands() -> None:
    h, _store, run_id = parked()
    found = h.store.get_run(run_id)
    assert found is not None
    update_run(h.store, run_id, lambda r: note(r, "meanwhile"))  # the run moved since the read
    action, after = asyncio.run(store_signal(h.store, found.record, SignalDelivery("approved"),
                                             redactor=Redactor(), actor="qa", clock=h.clock,
                                             known=found))  # fmt: skip
    assert action == "stored"
    stored = h.record(run_id)
    assert "approved" in stored.signals and after.signals.keys() == stored.signals.keys()
    assert [e.tool for e in stored.events][-2:] == ["meanwhile", "signal"]  # both kept


def test_a_hold_write_on_a_record_that_moved_since_its_read_is_decided_again() -> None:
    h, _store, run_id = parked()
    hold = asyncio.run(take(h.store, run_id, actor="sweep", clock=h.clock, env={}, held="{actor}"))
    try:
        update_run(h.store, run_id, lambda r: note(r, "meanwhile"))  # an append: no lease
        seen: list[list[str]] = []

        def change(fresh: RunRecord) -> RunDelta:
            seen.append([e.tool for e in fresh.events])
            return note(fresh, "hold's write")

        outcome = asyncio.run(hold.write(change))
    finally:
        asyncio.run(hold.release())
    assert isinstance(outcome, Updated)
    assert len(seen) == 2  # first on the hold's own read, then on a fresh one
    assert "meanwhile" not in seen[0] and "meanwhile" in seen[1]
    assert [e.tool for e in h.record(run_id).events][-2:] == ["meanwhile", "hold's write"]
