"""Journals that change behind the filesystem store's listing index, and are listed right anyway.

A journal can arrive or change without the index being told: copied in from
another store directory, restored over a file, or written by a zuke that
predates the index. A listing — the resume sweep's "suspended runs of this
build" above all — must still see each run, with its status as its journal
says (issue 15, item 24).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke.state import _journal
from zuke.state._files import append_line, atomic_write
from zuke.state._protocol import RunQuery, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunDelta, RunRecord, RunStatus, TargetRecord
from zuke.testing.store_contract import sample_record

SUSPENDED = RunQuery(status="suspended", build="ContractBuild")  # what a sweep asks
EVERY_RUN = RunQuery()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def store(directory: Path) -> FileSystemStateStore:
    return FileSystemStateStore(directory, clock=ManualClock())


def stamp(i: int) -> str:
    return f"2026-03-01T00:{i // 60:02d}:{i % 60:02d}.000Z"


def create(store: FileSystemStateStore, record: RunRecord) -> None:
    assert isinstance(store.create_run(record), Written)


def append(store: FileSystemStateStore, run_id: str, delta: RunDelta) -> None:
    stored = store.get_run(run_id)
    assert stored is not None
    assert isinstance(store.append_run(run_id, delta, expected_version=stored.version), Written)


def append_behind(directory: Path, run_id: str, delta: RunDelta) -> None:
    """Append ``delta`` as a zuke without the index does: the journal only."""
    path = str(directory / f"{run_id}{_journal.SUFFIX}")
    append_line(path, _journal.delta_line(delta), truncate_to=None, directory="", sync=False)


def write_behind(directory: Path, record: RunRecord) -> None:
    """Write a whole journal as a zuke without the index does."""
    data, _ = _journal.compacted(record)
    atomic_write(str(directory / f"{record.id}{_journal.SUFFIX}"), data, directory="")


def statuses(store: FileSystemStateStore, query: RunQuery = EVERY_RUN) -> dict[str, RunStatus]:
    return {s.id: s.status for s in store.list_runs(query)}


def started(store: FileSystemStateStore, n: int = 3) -> None:
    """``n`` running runs, listed once (so the index has looked at the directory)."""
    for i in range(n):
        create(store, sample_record(f"run-{i}", created_at=stamp(i)))
    assert statuses(store) == {f"run-{i}": "running" for i in range(n)}


def test_a_suspended_run_copied_in_from_another_store_is_found_by_a_sweep(
    tmp_path: Path, store: FileSystemStateStore, directory: Path
) -> None:
    started(store)
    elsewhere = FileSystemStateStore(tmp_path / "elsewhere", clock=ManualClock())
    create(elsewhere, sample_record("run-copied", created_at=stamp(10)))
    append(elsewhere, "run-copied", RunDelta(updated_at=stamp(11), status="suspended"))
    shutil.copy2(tmp_path / "elsewhere" / "run-copied.jsonl", directory / "run-copied.jsonl")

    assert statuses(store, SUSPENDED) == {"run-copied": "suspended"}
    (listed,) = [s for s in store.list_runs() if s.id == "run-copied"]
    assert listed == elsewhere.list_runs()[0]
    assert "run-copied" in store.index.ids(), "the listing indexed it"
    assert FileSystemStateStore(directory).list_runs(SUSPENDED) == [listed]


def test_a_journal_written_by_a_zuke_without_the_index_is_listed(
    store: FileSystemStateStore, directory: Path
) -> None:
    started(store)
    write_behind(directory, sample_record("run-old", status="suspended", created_at=stamp(20)))
    assert statuses(store, SUSPENDED) == {"run-old": "suspended"}
    assert list(statuses(store)) == ["run-old", "run-2", "run-1", "run-0"]


@pytest.mark.parametrize("rows", ["in the query", "left out by it"])
def test_a_status_appended_behind_the_index_is_listed_as_the_journal_says(
    store: FileSystemStateStore, directory: Path, rows: str
) -> None:
    started(store)
    if rows == "in the query":  # the index lists run-1 as suspended; it has finished since
        append(store, "run-1", RunDelta(updated_at=stamp(30), status="suspended"))
        assert statuses(store, SUSPENDED) == {"run-1": "suspended"}
        append_behind(directory, "run-1", RunDelta(updated_at=stamp(31), status="succeeded"))
        assert statuses(store, SUSPENDED) == {}
        assert statuses(store, RunQuery(status="succeeded")) == {"run-1": "succeeded"}
    else:  # the index lists run-1 as running; it has suspended since
        append_behind(directory, "run-1", RunDelta(updated_at=stamp(31), status="suspended"))
        assert statuses(store, SUSPENDED) == {"run-1": "suspended"}
        assert statuses(store, RunQuery(status="running")) == {
            "run-0": "running",
            "run-2": "running",
        }
    # The index was repaired: its row says what the journal says.
    with sqlite3.connect(directory / "index" / "runs.sqlite3") as db:
        (indexed,) = db.execute("SELECT status FROM runs WHERE id = 'run-1'").fetchone()
    run = store.get_run("run-1")
    assert run is not None and indexed == run.record.status


def test_a_journal_copied_over_an_indexed_one_is_listed_as_the_copy_says(
    tmp_path: Path, store: FileSystemStateStore, directory: Path
) -> None:
    started(store)
    backup = FileSystemStateStore(tmp_path / "backup", clock=ManualClock())
    create(backup, sample_record("run-2", created_at=stamp(2)))
    append(backup, "run-2", RunDelta(updated_at=stamp(40), status="suspended"))
    # copyfile writes in place: the directory does not change, only the file does
    shutil.copyfile(tmp_path / "backup" / "run-2.jsonl", directory / "run-2.jsonl")
    assert statuses(store, SUSPENDED) == {"run-2": "suspended"}
    assert statuses(store, RunQuery(status="running")) == {"run-0": "running", "run-1": "running"}


def test_an_append_the_index_was_not_told_of_is_read_once_then_not_again(
    store: FileSystemStateStore, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started(store, 1)
    for i in range(5):  # appends that change no listed field: the index is not written
        delta = RunDelta(updated_at=stamp(50 + i), targets={"build": TargetRecord("running")})
        append(store, "run-0", delta)
    assert [s.updated_at for s in store.list_runs()] == [stamp(54)]
    # The listing noted what it read. Now garble the journal but keep its size and
    # mtime: a listing that trusts the noted stat never reads it (or warns).
    path = directory / "run-0.jsonl"
    before = path.stat()
    path.write_bytes(b"x" * before.st_size)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        listed = store.list_runs(SUSPENDED) + store.list_runs()
    assert [(s.id, s.status, s.updated_at) for s in listed] == [("run-0", "running", stamp(54))]
    assert not [r for r in caplog.records if r.name == "zuke.state"]


def test_an_unreadable_journal_copied_in_is_reported_once(
    store: FileSystemStateStore, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    started(store, 1)
    (directory / "run-bad.jsonl").write_bytes(b"{ not a journal\n")
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        assert list(statuses(store)) == ["run-0"]
        create(store, sample_record("run-later", created_at=stamp(60)))  # the directory changes
        assert list(statuses(store)) == ["run-later", "run-0"]
    warned = [r.getMessage() for r in caplog.records if r.name == "zuke.state"]
    assert len(warned) == 1 and "run-bad" in warned[0], warned


def test_an_index_made_before_it_noted_journals_is_upgraded_in_place(
    store: FileSystemStateStore, directory: Path
) -> None:
    started(store)
    store.index.close()
    with sqlite3.connect(directory / "index" / "runs.sqlite3") as db:
        db.execute("DROP TABLE files")  # what the index of the previous zuke holds
    again = FileSystemStateStore(directory)
    append_behind(directory, "run-0", RunDelta(updated_at=stamp(70), status="suspended"))
    assert statuses(again, SUSPENDED) == {"run-0": "suspended"}
    assert statuses(again) == {"run-2": "running", "run-1": "running", "run-0": "suspended"}


def test_a_zuke_that_writes_the_index_but_not_what_it_saw_is_still_listed_right(
    store: FileSystemStateStore, directory: Path
) -> None:
    started(store)
    # The previous zuke appends a status and updates its `runs` row, not `files`.
    append_behind(directory, "run-1", RunDelta(updated_at=stamp(80), status="suspended"))
    with sqlite3.connect(directory / "index" / "runs.sqlite3") as db:
        db.execute("UPDATE runs SET status = 'suspended' WHERE id = 'run-1'")
    append_behind(directory, "run-1", RunDelta(updated_at=stamp(81), status="failed"))
    assert statuses(store, SUSPENDED) == {}
    assert statuses(store, RunQuery(status="failed")) == {"run-1": "failed"}
