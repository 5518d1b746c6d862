"""The service's database keeps PATCH deltas as a journal and folds them in."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from zuke._clock import ManualClock
from zuke._serve.db import StateDb
from zuke.state.records import RunDelta, RunRecord, TargetRecord, apply_deltas
from zuke.state.wire import loads_record, record_to_json


def base_record(targets: int) -> RunRecord:
    return RunRecord(
        id="run-1", build="B", root_target="t0", status="running", actor="me",
        created_at="2026-01-01T00:00:00.000Z", updated_at="2026-01-01T00:00:00.000Z",
        targets={f"t{i}": TargetRecord() for i in range(targets)},
    )  # fmt: skip


def deltas_in_db(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT COUNT(*) FROM run_deltas").fetchone()
    return int(count)


def test_patches_are_journaled_folded_on_read_and_compacted(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = StateDb(db_path, clock=ManualClock())
    record = base_record(50)
    etag = db.create_run("", record, json.dumps(record_to_json(record)))
    assert etag is not None
    deltas = []
    seen_journal = False
    for i in range(2000):
        delta = RunDelta(
            updated_at=f"2026-01-01T00:00:{i % 60:02d}.000Z",
            status="succeeded" if i == 1999 else None,
            targets={f"t{i % 50}": TargetRecord(status="running", meta={"i": i})},
        )
        outcome, etag = db.patch_run("", "run-1", delta, if_match=etag)
        assert outcome == "written"
        deltas.append(delta)
        seen_journal = seen_journal or deltas_in_db(db_path) > 0
    stored = db.get_run("", "run-1")
    assert stored is not None
    assert loads_record(stored.text) == apply_deltas(record, deltas)
    assert seen_journal  # patches went to the journal...
    assert deltas_in_db(db_path) < 1000  # ...and were folded in along the way
    assert [row[3] for row in db.list_runs("")] == ["succeeded"]
    db.close()


def test_a_stale_patch_is_refused_and_a_put_clears_the_journal(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = StateDb(db_path, clock=ManualClock())
    record = base_record(3)
    etag = db.create_run("", record, json.dumps(record_to_json(record)))
    assert etag is not None
    delta = RunDelta(updated_at="2026-01-01T00:00:01.000Z", actor="other")
    outcome, new_etag = db.patch_run("", "run-1", delta, if_match=etag)
    assert outcome == "written" and deltas_in_db(db_path) == 1
    assert db.patch_run("", "run-1", delta, if_match=etag)[0] == "mismatch"
    replaced = base_record(3)
    outcome, _ = db.update_run(
        "", replaced, json.dumps(record_to_json(replaced)), if_match=new_etag
    )
    assert outcome == "written" and deltas_in_db(db_path) == 0
    stored = db.get_run("", "run-1")
    assert stored is not None and loads_record(stored.text).actor == "me"
    db.close()


def test_a_run_without_journal_counters_is_counted_once_and_patched(tmp_path: Path) -> None:
    db_path = tmp_path / "state.db"
    db = StateDb(db_path, clock=ManualClock())
    record = base_record(3)
    etag = db.create_run("", record, json.dumps(record_to_json(record)))
    assert etag is not None
    first = RunDelta(updated_at="2026-01-01T00:00:01.000Z", actor="a")
    _, etag = db.patch_run("", "run-1", first, if_match=etag)
    with sqlite3.connect(db_path) as conn:  # as a database from before the counters
        conn.execute("DELETE FROM run_journal")
    second = RunDelta(updated_at="2026-01-01T00:00:02.000Z", status="failed")
    outcome, _ = db.patch_run("", "run-1", second, if_match=etag)
    stored = db.get_run("", "run-1")
    assert outcome == "written" and stored is not None
    assert loads_record(stored.text) == apply_deltas(record, [first, second])
    db.close()
