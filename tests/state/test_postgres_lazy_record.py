"""The run's writer on Postgres applies its deltas lazily, as on the filesystem store
(``append_after_lazily``, issue 28 §2): each write is the same compare-and-swap append,
the record is made only when a compaction is due or it is asked for, and the record the
writer holds is the database's through compactions."""

from __future__ import annotations

import asyncio

import pytest

from tests.writer_support import chain, count_record_builds
from zuke._clock import ManualClock
from zuke._engine import store_traits
from zuke._engine.writer import RunStateWriter
from zuke.state import _pg_runs
from zuke.state._protocol import StoredRun
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunRecord, TargetRecord
from zuke.testing.store_contract import fresh

CLOCK = ManualClock()
STAMP = "2026-01-01T00:00:00.000Z"


# no test here is about migrating a database: each test's comes at the schema
pytestmark = pytest.mark.pg_migrated


class CountingStore(PostgresStateStore):
    """The Postgres store, counting whole reads of a run (a compaction must not need one)."""

    append_after_lazily = True  # the traits are the class's own: a subclass says them again
    inline_writes = True
    reads = 0

    def get_run(self, run_id: str) -> StoredRun | None:
        self.reads += 1
        return super().get_run(run_id)


def _record(run_id: str, n: int, lease: tuple[str, str]) -> RunRecord:
    return RunRecord(
        id=run_id, build="B", root_target=f"t{n - 1:02d}", status="running", actor="me",
        created_at=STAMP, updated_at=STAMP, locks=dict([lease]),
        targets={f"t{i:02d}": TargetRecord() for i in range(n)},
    )  # fmt: skip


async def _writer(store: PostgresStateStore, n: int) -> RunStateWriter:
    run_id = fresh()
    lease = (f"zuke-run-{run_id}", "token-1")
    writer = RunStateWriter(store, _record(run_id, n, lease), version=None, clock=CLOCK)
    await writer.create()
    writer.lease = lease
    return writer


def test_the_postgres_store_takes_after_lazily(pg_url: str) -> None:
    store = PostgresStateStore(pg_url)
    try:
        assert store_traits.lazy_after(store) and store_traits.local(store)
    finally:
        store.close()


def test_the_record_held_is_the_databases_through_compactions(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg_runs, "COMPACT_MIN_BYTES", 1024)  # compact every few writes
    names = [f"t{i:02d}" for i in range(40)]
    store = CountingStore(pg_url)

    async def go() -> RunStateWriter:
        writer = await _writer(store, 40)
        await chain(writer, names[:20], CLOCK)
        middle = writer.record  # asked for mid-run: what is pending is applied, none lost
        assert middle.targets["t19"].status == "running"
        await chain(writer, names[20:], CLOCK)
        await writer.finish("succeeded")
        return writer

    try:
        writer = asyncio.run(go())
        assert store.reads == 0  # every compaction wrote the record the writer made
        found = PostgresStateStore.get_run(store, writer.run_id)
        assert found is not None
        assert (found.version, found.record) == (writer.version, writer.record)
        assert found.record.status == "succeeded"
        assert all(found.record.targets[n].status == "succeeded" for n in names)
        with store.database.connection() as conn:
            row = conn.execute(
                "SELECT count(*) FROM zuke_run_deltas WHERE run_id = %s", (writer.run_id,)
            ).fetchone()
        assert row is not None and row[0] < 40  # compacted: not one delta per write
    finally:
        store.close()


def test_no_delta_is_applied_to_the_record_until_it_is_asked_for(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied = count_record_builds(monkeypatch)
    store = PostgresStateStore(pg_url)

    async def go() -> None:
        writer = await _writer(store, 30)
        await chain(writer, [f"t{i:02d}" for i in range(30)], CLOCK)
        assert applied == []  # 30 appends (no compaction due), no record made
        found = store.get_run(writer.run_id)
        assert found is not None and writer.record == found.record
        assert applied[-1] == 30  # made once, when asked for: every delta in one pass

    try:
        asyncio.run(go())
    finally:
        store.close()
