"""The writer's record, applied lazily on a store that takes ``after`` as a function (the
filesystem store): each write's first attempt is the same compare-and-swap append, the
deltas are applied to the record only when it is asked for or a compaction is due, and
everything ``update_run`` decides on its first attempt is decided the same (issue 28 §1:
applying each delta as it was written copied every target's row once a write)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.writer_support import chain, count_record_builds
from zuke._clock import ManualClock
from zuke._engine import record_writes
from zuke._engine.observer import Transition
from zuke._engine.writer import RunStateWriter
from zuke.state import _journal, records
from zuke.state._protocol import Conflict, StoredRun, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunDelta, RunEvent, RunRecord, TargetRecord

CLOCK = ManualClock()
STAMP = "2026-01-01T00:00:00.000Z"
LEASE = ("zuke-run-run-1", "token-1")


def record(n: int) -> RunRecord:
    return RunRecord(
        id="run-1", build="B", root_target=f"t{n - 1:02d}", status="running", actor="me",
        created_at=STAMP, updated_at=STAMP, locks=dict([LEASE]),
        targets={f"t{i:02d}": TargetRecord() for i in range(n)},
    )  # fmt: skip


class CountingStore(FileSystemStateStore):
    """The filesystem store, counting whole reads of a run (a compaction must not need one)."""

    append_after_lazily = True  # the trait is the class's own: a subclass says it again
    reads = 0

    def get_run(self, run_id: str) -> StoredRun | None:
        self.reads += 1
        return super().get_run(run_id)


async def open_writer(store: FileSystemStateStore, n: int) -> RunStateWriter:
    writer = RunStateWriter(store, record(n), version=None, clock=CLOCK)
    await writer.create()
    writer.lease = LEASE
    return writer


def stored(store: FileSystemStateStore) -> StoredRun:
    found = FileSystemStateStore(store.directory).get_run("run-1")
    assert found is not None
    return found


def test_the_record_held_is_the_journals_through_compactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal, "COMPACT_MIN_BYTES", 1024)  # compact every few writes
    names = [f"t{i:02d}" for i in range(40)]

    async def go() -> None:
        store = CountingStore(tmp_path)
        writer = await open_writer(store, 40)
        await chain(writer, names[:20], CLOCK)
        middle = writer.record  # asked for mid-run: what is pending is applied, none lost
        assert middle.targets["t19"].status == "running"
        await chain(writer, names[20:], CLOCK)
        await writer.finish("succeeded")
        found = stored(store)
        assert writer.version == found.version
        assert writer.record == found.record
        assert found.record.status == "succeeded"
        assert all(found.record.targets[n].status == "succeeded" for n in names)
        assert store.reads == 0  # every compaction wrote the record the writer made

    asyncio.run(go())
    journal = (tmp_path / "run-1.jsonl").read_bytes()
    assert journal.count(b"\n") < 40  # compacted: not one line per write since the start


def test_no_delta_is_applied_to_the_record_until_it_is_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied = count_record_builds(monkeypatch)

    async def go() -> None:
        store = CountingStore(tmp_path)
        writer = await open_writer(store, 30)
        await chain(writer, [f"t{i:02d}" for i in range(30)], CLOCK)
        assert applied == []  # 30 appends (no compaction due), no record made
        assert writer.record == stored(store).record
        assert applied == [30]  # made once, when asked for: every delta in one pass

    asyncio.run(go())


def test_a_first_attempt_that_conflicts_rereads_and_lands_on_the_fresh_record(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        store = CountingStore(tmp_path)
        writer = await open_writer(store, 3)
        await chain(writer, ["t00"], CLOCK)
        # another process (zuke's audit trail, a signal) appends to the same journal
        other = FileSystemStateStore(tmp_path)
        found = other.get_run("run-1")
        assert found is not None
        event = RunEvent(at=STAMP, tool="signal", actor="someone", outcome="ok")
        theirs = other.append_run("run-1", RunDelta(updated_at=STAMP, events=(event,)),
                                  expected_version=found.version)  # fmt: skip
        assert isinstance(theirs, Written)
        reads = store.reads
        await chain(writer, ["t01"], CLOCK)
        assert store.reads == reads + 1  # the conflict re-read the run once
        after = stored(store)
        assert [e.actor for e in after.record.events] == ["someone"]  # theirs survived
        assert after.record.targets["t01"].status == "running"  # ours landed on top
        assert writer.record.events == after.record.events
        assert writer.version == after.version

    asyncio.run(go())


def test_a_record_that_no_longer_names_the_lease_is_not_written(tmp_path: Path) -> None:
    async def go() -> None:
        store = CountingStore(tmp_path)
        writer = await open_writer(store, 3)
        await chain(writer, ["t00"], CLOCK)
        writer.note_lock(LEASE[0], None)  # the lease given back (as a run's end does)
        await writer.flush()
        before = stored(store).version
        await writer.transition(Transition("t01", "running", CLOCK.now_ms()))
        assert stored(store).version == before  # nothing more was written
        assert writer.settled_elsewhere == "running"  # taken for another holder's run
        assert not writer.owns_run()

    asyncio.run(go())


def test_a_store_that_does_not_say_so_gets_the_record_itself(tmp_path: Path) -> None:
    class Plain(FileSystemStateStore):
        """A subclass that does not say the trait itself: update_run's path, as before."""

    afters: list[object] = []

    class Watching(Plain):
        def append_run_known(
            self,
            run_id: str,
            delta: RunDelta,
            *,
            expected_version: str,
            after: RunRecord | Callable[[], RunRecord] | None = None,
        ) -> Written | Conflict:
            afters.append(after)
            return super().append_run_known(
                run_id, delta, expected_version=expected_version, after=after
            )

    async def go() -> None:
        store = Watching(tmp_path)
        writer = await open_writer(store, 3)
        await chain(writer, ["t00", "t01"], CLOCK)
        await writer.finish("succeeded")
        assert afters and all(isinstance(a, RunRecord) for a in afters)
        assert writer.record == stored(store).record

    asyncio.run(go())


def test_a_chain_makes_one_delta_a_write_and_merges_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    merges: list[RunDelta] = []
    real = records.merge_deltas

    def counted(first: RunDelta, second: RunDelta) -> RunDelta:
        merges.append(second)
        return real(first, second)

    monkeypatch.setattr(record_writes, "merge_deltas", counted)

    async def go() -> None:
        store = CountingStore(tmp_path)
        writer = await open_writer(store, 10)
        await chain(writer, [f"t{i:02d}" for i in range(10)], CLOCK)
        assert merges == []  # a settlement and the next running: one delta, nothing merged
        await writer.finish("succeeded")
        rows = stored(store).record.targets
        assert all(rows[f"t{i:02d}"].status == "succeeded" for i in range(10))

    asyncio.run(go())


def test_rows_and_other_changes_queued_together_keep_their_order(tmp_path: Path) -> None:
    clock = ManualClock(1_800_000_000_000)

    async def go() -> None:
        store = CountingStore(tmp_path)
        writer = RunStateWriter(store, record(3), version=None, clock=clock)
        await writer.create()
        writer.lease = LEASE
        await writer.transition(Transition("t00", "running", clock.now_ms()))
        clock.advance(5)
        await writer.transition(Transition("t00", "succeeded", clock.now_ms()))  # queued
        clock.advance(5)
        writer.append_event("note", detail="between")  # queued after the row
        clock.advance(5)
        writer.note_lock("other", "tok")
        clock.advance(5)
        await writer.transition(Transition("t01", "running", clock.now_ms()))  # the write
        lines = (tmp_path / "run-1.jsonl").read_bytes().splitlines()
        wire = json.loads(lines[-1])
        assert list(wire["targets"]) == ["t00", "t01"]
        assert wire["targets"]["t00"]["status"] == "succeeded"
        assert [e["detail"] for e in wire["events"]] == ["between"]
        assert wire["locks"] == {"other": "tok"}
        assert wire["updatedAt"] == "2027-01-15T08:00:00.020Z"  # the last change's time
        assert writer.record == stored(store).record

    asyncio.run(go())
