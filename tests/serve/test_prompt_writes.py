"""Journal appends the event loop answers itself, and every way such a write gives way.

A prompt write (``StateDb.promptly()``) must never wait: whatever would make
it wait raises ``WouldWait`` before anything is written, and the same append
then lands from a worker thread. Over HTTP, an append that needs no waiting
is answered on the event loop's thread; one that changes the run's status
(an fsync) is answered by a worker.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.serve.support import TOKEN
from zuke._clock import ManualClock
from zuke._serve import StateServer
from zuke._serve.db import COMPACT_MIN_BYTES, StateDb
from zuke._serve.sqlite import PROMPT_WRITES_PER_WORKER, WouldWait
from zuke.state.http import HttpStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord, apply_deltas
from zuke.state.wire import loads_record, record_to_json

DEADLINE_S = 15.0


def base_record(run_id: str = "run-1") -> RunRecord:
    return RunRecord(
        id=run_id, build="B", root_target="t0", status="running", actor="me",
        created_at="2026-01-01T00:00:00.000Z", updated_at="2026-01-01T00:00:00.000Z",
        targets={f"t{i}": TargetRecord() for i in range(3)},
    )  # fmt: skip


def delta(i: int, **fields: Any) -> RunDelta:
    return RunDelta(
        updated_at=f"2026-01-01T00:00:{i % 60:02d}.000Z",
        targets={"t0": TargetRecord(status="running", meta={"i": i})},
        **fields,
    )


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[StateDb, str]]:
    state = StateDb(tmp_path / "state.db", clock=ManualClock())
    record = base_record()
    etag = state.create_run("", record, json.dumps(record_to_json(record)))
    assert etag is not None
    yield state, etag
    state.close()


def stored(state: StateDb) -> RunRecord:
    found = state.get_run("", "run-1")
    assert found is not None
    return loads_record(found.text)


def test_a_prompt_append_is_committed_like_any_other(db: tuple[StateDb, str]) -> None:
    state, etag = db
    with state.promptly():
        outcome, new_etag = state.patch_run("", "run-1", delta(1), if_match=etag)
        assert state.patch_run("", "run-1", delta(2), if_match=etag)[0] == "mismatch"
    assert outcome == "written"
    assert stored(state) == apply_deltas(base_record(), [delta(1)])
    assert state.get_run("", "run-1").etag == new_etag  # type: ignore[union-attr]


def test_a_status_change_is_not_taken_promptly_it_needs_an_fsync(
    db: tuple[StateDb, str],
) -> None:
    state, etag = db
    with state.promptly(), pytest.raises(WouldWait):
        state.patch_run("", "run-1", delta(1, status="succeeded"), if_match=etag)
    assert stored(state) == base_record()  # nothing written
    assert state.patch_run("", "run-1", delta(1, status="succeeded"), if_match=etag)[0] == (
        "written"
    )


def test_a_prompt_write_gives_way_to_a_worker_holding_the_write_lock(
    db: tuple[StateDb, str],
) -> None:
    state, etag = db
    inside, release = threading.Event(), threading.Event()
    results: list[str] = []

    def worker() -> None:
        # A write that holds the lock until told to finish (as a slow fsync would).
        with state._pool.write() as conn:
            inside.set()
            assert release.wait(DEADLINE_S)
            conn.execute("SELECT 1")
        results.append("done")

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert inside.wait(DEADLINE_S)
        with state.promptly(), pytest.raises(WouldWait):
            state.patch_run("", "run-1", delta(1), if_match=etag)
    finally:
        release.set()
        thread.join(DEADLINE_S)
    assert results == ["done"]
    assert stored(state) == base_record()


def test_a_prompt_write_gives_way_to_another_process_holding_sqlites_lock(
    db: tuple[StateDb, str], tmp_path: Path
) -> None:
    state, etag = db
    other = sqlite3.connect(tmp_path / "state.db", isolation_level=None)  # as a second server
    other.execute("BEGIN IMMEDIATE")
    try:
        with state.promptly(), pytest.raises(WouldWait):
            state.patch_run("", "run-1", delta(1), if_match=etag)
    finally:
        other.execute("ROLLBACK")
        other.close()
    with state.promptly():
        assert state.patch_run("", "run-1", delta(1), if_match=etag)[0] == "written"


def test_an_append_that_would_fold_the_journal_gives_way_and_the_worker_folds_it(
    db: tuple[StateDb, str], tmp_path: Path
) -> None:
    state, etag = db
    big = {"blob": "x" * (COMPACT_MIN_BYTES // 4)}
    applied: list[RunDelta] = []
    with state.promptly():
        for i in range(3):  # three quarters of the threshold: journaled, not folded
            change = RunDelta(updated_at="2026-01-01T00:00:01.000Z",
                              targets={"t1": TargetRecord(meta={**big, "i": i})})  # fmt: skip
            etag = state.patch_run("", "run-1", change, if_match=etag)[1]
            applied.append(change)
        last = RunDelta(updated_at="2026-01-01T00:00:02.000Z",
                        targets={"t2": TargetRecord(meta=big)})  # fmt: skip
        with pytest.raises(WouldWait):
            state.patch_run("", "run-1", last, if_match=etag)
    assert journal_rows(tmp_path) == 3  # the refused fold changed nothing
    assert state.patch_run("", "run-1", last, if_match=etag)[0] == "written"
    assert journal_rows(tmp_path) == 0  # folded, by the worker's write
    assert stored(state) == apply_deltas(base_record(), [*applied, last])


def journal_rows(tmp_path: Path) -> int:
    with sqlite3.connect(tmp_path / "state.db") as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM run_deltas").fetchone()
    return int(count)


def test_every_so_many_prompt_writes_one_goes_to_a_worker_which_checkpoints(
    db: tuple[StateDb, str],
) -> None:
    state, etag = db
    with state.promptly():
        for i in range(PROMPT_WRITES_PER_WORKER):
            etag = state.patch_run("", "run-1", delta(i), if_match=etag)[1]
        with pytest.raises(WouldWait):
            state.patch_run("", "run-1", delta(-1), if_match=etag)
    etag = state.patch_run("", "run-1", delta(-1), if_match=etag)[1]  # a worker's write
    with state.promptly():
        assert state.patch_run("", "run-1", delta(-2), if_match=etag)[0] == "written"


# ------------------------------------------------------------------ over HTTP


def test_an_append_is_answered_on_the_event_loop_and_a_status_change_by_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    threads: list[str] = []
    patch_run = StateDb.patch_run

    def recording(self: StateDb, *args: Any, **kwargs: Any) -> Any:
        threads.append(threading.current_thread().name)
        return patch_run(self, *args, **kwargs)

    monkeypatch.setattr(StateDb, "patch_run", recording)
    with (
        StateServer(db_path=tmp_path / "state.db", token=TOKEN) as server,
        HttpStateStore(server.url, token=TOKEN) as store,
    ):
        run_id = f"r-{uuid.uuid4().hex[:10]}"
        version = store.create_run(base_record(run_id)).version  # type: ignore[union-attr]
        version = store.append_run(run_id, delta(1), expected_version=version).version  # type: ignore[union-attr]
        store.append_run(run_id, delta(2, status="succeeded"), expected_version=version)
        final = store.get_run(run_id)
    assert final is not None and final.record.status == "succeeded"
    # The loop's thread is uvicorn's ("zuke-serve"); workers are "zuke-serve_N".
    assert threads[0] == "zuke-serve"
    assert threads[1] == "zuke-serve"  # the prompt attempt, which gave way...
    assert threads[2].startswith("zuke-serve_")  # ...to a worker
    assert len(threads) == 3
