"""The Postgres store's append sent now and answered later (``send_append_known``, issue 28 §2):
the same compare-and-swap, witness and compaction as ``append_run_known``; a lost answer
looked up by its witness, never applied twice; and a run's writer that uses it ends with
the same record."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.pg_support import LosingProxy, Mode, PgCluster
from tests.state.pg_rows import run_rows
from zuke._clock import ManualClock
from zuke._engine import store_traits
from zuke._engine.observer import Observers, Transition
from zuke._engine.writer import RunStateWriter
from zuke.state import _pg_pool, _pg_runs
from zuke.state._protocol import Conflict, Written
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord
from zuke.testing.store_contract import fresh

CLOCK = ManualClock()
STAMP = "2026-01-01T00:00:00.000Z"
#: how long the sending connection may take to come up
DEADLINE_S = 10.0


# no test here is about migrating a database: each test's comes at the schema
pytestmark = pytest.mark.pg_migrated


def _record(n: int = 3) -> RunRecord:
    return RunRecord(
        id=fresh(), build="B", root_target="t0", status="running", actor="me",
        created_at=STAMP, updated_at=STAMP,
        targets={f"t{i}": TargetRecord() for i in range(n)},
    )  # fmt: skip


def _running(name: str, pad: int = 0) -> RunDelta:
    row = TargetRecord(status="running", started_at=STAMP, meta={"pad": "x" * pad} if pad else {})
    return RunDelta(updated_at=STAMP, targets={name: row})


def _send(
    store: PostgresStateStore, record: RunRecord, delta: RunDelta, version: str
) -> Callable[[], Written | Conflict]:
    """``send_append_known`` once the sending connection is up (it says ``None`` until then)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = store.send_append_known(
            record.id, delta, expected_version=version, after=lambda: record
        )
        if answer is not None:
            return answer
        assert time.monotonic() < deadline, "the sending connection never came up"
        time.sleep(0.005)


def _created(store: PostgresStateStore, record: RunRecord) -> str:
    made = store.create_run(record)
    assert isinstance(made, Written)
    return made.version


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    made = PostgresStateStore(pg_url)
    yield made
    made.close()


def test_the_postgres_store_sends_appends(store: PostgresStateStore) -> None:
    assert store_traits.sends_appends(store)


def test_a_sent_append_is_the_compare_and_swap_append_with_its_witness(
    store: PostgresStateStore,
) -> None:
    record = _record()
    version = _created(store, record)
    outcome = _send(store, record, _running("t0"), version)()
    assert isinstance(outcome, Written) and outcome.version != version
    found = store.get_run(record.id)
    assert found is not None
    assert found.version == outcome.version
    assert found.record.targets["t0"].status == "running"
    with store.database.connection() as conn:
        key = _pg_runs.write_key(int(outcome.version))
        made, now = _pg_runs.witnessed(conn, "", record.id, key)
    assert (made, now) == (int(outcome.version), int(outcome.version))


def test_a_sent_append_at_a_version_that_moved_answers_a_conflict(
    store: PostgresStateStore,
) -> None:
    record = _record()
    version = _created(store, record)
    moved = store.append_run(record.id, _running("t1"), expected_version=version)
    assert isinstance(moved, Written)
    assert isinstance(_send(store, record, _running("t0"), version)(), Conflict)
    found = store.get_run(record.id)
    assert found is not None and found.version == moved.version
    assert found.record.targets["t0"].status == "pending"  # nothing of it landed


def test_what_another_statement_carries_is_not_sent(store: PostgresStateStore) -> None:
    record = _record()
    version = _created(store, record)
    _send(store, record, _running("t0"), version)()  # the connection is up now
    found = store.get_run(record.id)
    assert found is not None
    ending = RunDelta(updated_at=STAMP, status="succeeded")
    assert store.send_append_known(
        record.id, ending, expected_version=found.version, after=lambda: record
    ) is None  # fmt: skip
    assert store.send_append_known(
        record.id, _running("t1"), expected_version="not-a-version", after=lambda: record
    ) is None  # fmt: skip


@pytest.mark.parametrize("mode", ["answer", "request"])
def test_a_sent_append_whose_connection_broke_is_applied_exactly_once(
    pg_url: str, pg_cluster: PgCluster, proxy: LosingProxy, mode: Mode
) -> None:
    store = PostgresStateStore(pg_url.replace(f":{pg_cluster.port}/", f":{proxy.port}/"))
    try:
        record = _record()
        version = _created(store, record)
        marker = f"marker-{uuid.uuid4().hex}"
        delta = RunDelta(updated_at=STAMP, targets={"t0": TargetRecord(meta={"m": marker})})
        _send(store, record, _running("t1"), version)()  # the sending connection is up
        found = store.get_run(record.id)
        assert found is not None
        proxy.arm(marker, mode)
        outcome = _send(store, record, delta, found.version)()
        assert proxy.tripped.is_set()
        assert isinstance(outcome, Written)  # looked up by its witness, or sent again once
        after = store.get_run(record.id)
        assert after is not None and after.version == outcome.version
        assert after.record.targets["t0"].meta == {"m": marker}
        assert run_rows(store, "zuke_run_deltas", record.id) == 2
        # the broken connection was dropped: the next append is sent on a fresh one
        assert isinstance(_send(store, record, _running("t2"), outcome.version)(), Written)
    finally:
        store.close()


def test_a_sent_append_that_makes_a_compaction_due_compacts(
    store: PostgresStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_pg_runs, "COMPACT_MIN_BYTES", 1024)
    record = _record()
    version = _created(store, record)
    delta = _running("t0", pad=4000)
    made = replace(record, targets={**record.targets, **delta.targets})
    answer = store.send_append_known
    deadline = time.monotonic() + DEADLINE_S
    while (sent := answer(record.id, delta, expected_version=version, after=lambda: made)) is None:
        assert time.monotonic() < deadline, "the sending connection never came up"
        time.sleep(0.005)
    outcome = sent()
    assert isinstance(outcome, Written)
    # folded into the record, at the version it made
    assert run_rows(store, "zuke_run_deltas", record.id) == 0
    found = store.get_run(record.id)
    assert found is not None and (found.version, found.record) == (outcome.version, made)


def test_a_run_written_through_sent_appends_ends_with_every_row(store: PostgresStateStore) -> None:
    names = [f"t{i}" for i in range(40)]
    record = _record(40)

    async def go() -> RunStateWriter:
        writer = RunStateWriter(store, record, version=None, clock=CLOCK)
        writer.inline = lambda: True
        await writer.create()
        observers = Observers([], writer=writer)
        for name in names:
            await observers.transition(Transition(name, "running", CLOCK.now_ms()))
            await observers.transition(Transition(name, "succeeded", CLOCK.now_ms()))
        await writer.finish("succeeded")
        return writer

    writer = asyncio.run(go())
    assert writer.record_error is None
    found = store.get_run(record.id)
    assert found is not None
    assert (found.version, found.record) == (writer.version, writer.record)
    assert found.record.status == "succeeded"
    assert all(found.record.targets[n].status == "succeeded" for n in names)


@pytest.mark.psycopg  # needs the postgres extra, no cluster
def test_the_waits_poll_states_are_psycopg2s() -> None:
    import psycopg2.extensions as ext

    assert (_pg_pool.POLL_OK, _pg_pool.POLL_READ) == (ext.POLL_OK, ext.POLL_READ)


def test_an_append_is_sent_on_the_pools_connection_no_other(store: PostgresStateStore) -> None:
    record = _record()
    version = _created(store, record)
    outcome = _send(store, record, _running("t0"), version)()
    assert isinstance(outcome, Written)
    with store.database.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        ).fetchone()
    assert row is not None and row[0] == 1  # the pool's one connection: no second backend


def test_while_an_answer_is_out_another_append_goes_the_ordinary_way(
    store: PostgresStateStore,
) -> None:
    record = _record()
    version = _created(store, record)
    first = _send(store, record, _running("t0"), version)
    # another run's writer (another thread) while the answer is out: its connection is lent
    assert store.send_append_known(
        record.id, _running("t1"), expected_version=version, after=lambda: record
    ) is None  # fmt: skip
    outcome = first()
    assert isinstance(outcome, Written)
    again = _send(store, record, _running("t1"), outcome.version)()
    assert isinstance(again, Written)


def test_a_connection_past_descriptor_1024_is_waited_on(pg_url: str) -> None:
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"this process may open {hard} files, fewer than the test needs")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]  # select(2) stops at 1024
    store = PostgresStateStore(pg_url)
    try:
        record = _record()
        version = _created(store, record)
        lent = store.database.lend_idle()
        assert lent is not None and lent[1].raw.fileno() >= 1024
        lent[0].give(lent[1])
        assert isinstance(_send(store, record, _running("t0"), version)(), Written)
    finally:
        store.close()
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
