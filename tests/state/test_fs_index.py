"""The filesystem store's listing index: what a listing reads, crash recovery, rebuilds.

Speed is measured in benchmarks/bench_state.py; these tests pin the behaviour
that makes it fast (a listing reads only the journals it returns; an append
that changes no listed field does not write the index) and the recovery rules
(a writer killed between the journal write and the index update, a deleted or
corrupt index, journals added or removed by hand).
"""

from __future__ import annotations

import logging
import random
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke.state import _journal
from zuke.state._protocol import LockAcquired, RunQuery, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RUN_STATUSES, RunDelta, RunRecord, TargetRecord
from zuke.testing.store_contract import sample_holder, sample_record


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def store(directory: Path) -> FileSystemStateStore:
    return FileSystemStateStore(directory, clock=ManualClock())


def stamp(i: int) -> str:
    return f"2026-02-{1 + i // 1440:02d}T{i // 60 % 24:02d}:{i % 60:02d}:00.000Z"


def create(store: FileSystemStateStore, record: RunRecord) -> str:
    result = store.create_run(record)
    assert isinstance(result, Written)
    return result.version


def append(store: FileSystemStateStore, run_id: str, delta: RunDelta) -> str:
    stored = store.get_run(run_id)
    assert stored is not None
    result = store.append_run(run_id, delta, expected_version=stored.version)
    assert isinstance(result, Written)
    return result.version


def zuke_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "zuke.state"]


def test_a_listing_reads_only_the_journals_it_returns(
    store: FileSystemStateStore, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    runs = [sample_record(f"run-{i:02d}", created_at=stamp(i)) for i in range(30)]
    for run in runs:
        create(store, run)
    append(store, "run-07", RunDelta(updated_at=stamp(100), status="suspended"))
    # Every journal the listings below must not return is made unreadable:
    # reading any of them would log a warning and drop it. They are finished
    # first: a status listing also checks the runs still open (running,
    # suspended, cancelling) it leaves out, since those may move on behind
    # the index's back; finished ones do not.
    for run in runs:
        if run.id not in ("run-29", "run-28", "run-07"):
            append(store, run.id, RunDelta(updated_at=stamp(101), status="succeeded"))
            (directory / f"{run.id}.jsonl").write_bytes(b"{ not a journal\n")
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        newest = store.list_runs(RunQuery(limit=2))
        suspended = store.list_runs(RunQuery(status="suspended"))
        by_build = store.list_runs(RunQuery(build="ContractBuild", limit=1))
    assert [s.id for s in newest] == ["run-29", "run-28"]
    assert [(s.id, s.updated_at) for s in suspended] == [("run-07", stamp(100))]
    assert [s.id for s in by_build] == ["run-29"]
    assert zuke_warnings(caplog) == []


def test_an_append_that_changes_no_listed_field_does_not_write_the_index(
    store: FileSystemStateStore, directory: Path
) -> None:
    create(store, sample_record("run-1"))
    files = sorted((directory / "index").iterdir())
    before = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    for i in range(20):
        delta = RunDelta(updated_at=stamp(i), targets={"build": TargetRecord(status="running")})
        append(store, "run-1", delta)
    after = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    assert after == before
    assert [s.updated_at for s in store.list_runs()] == [stamp(19)]


_KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from zuke.state import _journal
    from zuke.state._fs_index import RunIndex
    from zuke.state.filesystem import FileSystemStateStore
    from zuke.state.records import RunDelta, TargetRecord
    from zuke.testing.store_contract import sample_record

    def die(*args, **kwargs):
        os._exit(9)  # the journal is written; the index is never told

    directory, op = sys.argv[1], sys.argv[2]
    store = FileSystemStateStore(directory)
    RunIndex.put = RunIndex.update = RunIndex.remove = die
    version = store.get_run("run-1").version
    if op == "create":
        store.create_run(sample_record("run-2", created_at="2026-03-01T00:00:00.000Z"))
    elif op == "suspend":
        delta = RunDelta(updated_at="2026-03-02T00:00:00.000Z", status="suspended")
        store.append_run("run-1", delta, expected_version=version)
    elif op == "delete":
        store.delete_run("run-1")
    elif op == "compact":
        _journal.COMPACT_MIN_BYTES = 0
        delta = RunDelta(
            updated_at="2026-03-03T00:00:00.000Z",
            targets={"build": TargetRecord(meta={"pad": "x" * 4000})},
        )
        store.append_run("run-1", delta, expected_version=version)
    print("the writer was not stopped")
    """
)


@pytest.mark.parametrize("op", ["create", "suspend", "delete", "compact"])
def test_a_writer_killed_between_the_journal_and_the_index_leaves_a_correct_listing(
    directory: Path, op: str
) -> None:
    create(FileSystemStateStore(directory), sample_record("run-1"))
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_WRITER, str(directory), op],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 9, child.stdout + child.stderr
    store = FileSystemStateStore(directory)  # a later process lists
    journals = {r.id: r.summary() for r in store.scan()}
    expected = sorted(journals.values(), key=lambda s: (s.created_at, s.id), reverse=True)
    assert store.list_runs() == expected
    if op == "suspend":
        assert [s.id for s in store.list_runs(RunQuery(status="suspended"))] == ["run-1"]
    if op == "compact":
        assert expected[0].updated_at == "2026-03-03T00:00:00.000Z"
    assert store.index.dirty() == [], "the listing repaired the rows"
    assert store.list_runs() == expected


def test_a_deleted_index_is_rebuilt_from_the_journals(directory: Path) -> None:
    first = FileSystemStateStore(directory)
    for i in range(5):
        create(first, sample_record(f"run-{i}", created_at=stamp(i)))
    append(first, "run-3", RunDelta(updated_at=stamp(50), status="failed"))
    expected = first.list_runs()
    first.index.close()
    shutil.rmtree(directory / "index")
    again = FileSystemStateStore(directory)
    assert again.list_runs() == expected
    assert again.index.complete()
    assert [s.id for s in again.list_runs(RunQuery(status="failed"))] == ["run-3"]


def test_a_corrupt_index_is_moved_aside_and_rebuilt(
    directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = FileSystemStateStore(directory)
    for i in range(3):
        create(first, sample_record(f"run-{i}", created_at=stamp(i)))
    expected = first.list_runs()
    first.index.close()
    for leftover in (directory / "index").glob("runs.sqlite3-*"):
        leftover.unlink()
    (directory / "index" / "runs.sqlite3").write_bytes(b"this is not a database" * 200)
    damaged = FileSystemStateStore(directory)
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        assert damaged.list_runs() == expected
    assert any("kept it as" in w for w in zuke_warnings(caplog))
    assert list((directory / "index").glob("runs.sqlite3.corrupt-*"))
    # A write finds a corrupt index too, and recovers the same way.
    first.index.close()
    (directory / "index" / "runs.sqlite3").write_bytes(b"this is not a database" * 200)
    writer = FileSystemStateStore(directory)
    create(writer, sample_record("run-new", created_at=stamp(9)))
    assert [s.id for s in writer.list_runs()] == ["run-new"] + [s.id for s in expected]


def test_journals_copied_in_by_hand_are_listed_without_a_rebuild(
    tmp_path: Path, store: FileSystemStateStore, directory: Path
) -> None:
    create(store, sample_record("run-here", created_at=stamp(1)))
    assert [s.id for s in store.list_runs()] == ["run-here"]
    elsewhere = FileSystemStateStore(tmp_path / "elsewhere")
    create(elsewhere, sample_record("run-copied", created_at=stamp(2)))
    shutil.copy(tmp_path / "elsewhere" / "run-copied.jsonl", directory / "run-copied.jsonl")
    assert [s.id for s in store.list_runs()] == ["run-copied", "run-here"]
    store.rebuild_index()  # still there for a restore done in place over finished runs
    assert [s.id for s in store.list_runs()] == ["run-copied", "run-here"]


def test_a_journal_removed_by_hand_drops_out_of_the_listing_and_the_index(
    store: FileSystemStateStore, directory: Path
) -> None:
    for i in range(3):
        create(store, sample_record(f"run-{i}", created_at=stamp(i)))
    (directory / "run-1.jsonl").unlink()
    assert [s.id for s in store.list_runs()] == ["run-2", "run-0"]
    assert store.index.ids() == {"run-0", "run-2"}
    assert not (directory / "run-1.lock").exists()


def test_a_store_whose_index_cannot_be_opened_lists_by_scanning(
    store: FileSystemStateStore, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        create(store, sample_record(f"run-{i}", created_at=stamp(i)))
    expected = store.list_runs()
    store.index.close()
    shutil.rmtree(directory / "index")
    (directory / "index").write_text("a file where the index directory should be")
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        assert FileSystemStateStore(directory).list_runs() == expected
    assert any("by reading every run file" in w for w in zuke_warnings(caplog))


def test_a_random_history_lists_exactly_like_the_memory_store(
    store: FileSystemStateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal, "COMPACT_MIN_BYTES", 2048)  # compact often
    memory = MemoryStateStore()
    rng = random.Random(7)
    builds, names = ("Release", "Nightly", "Docs"), ("lint", "build", "test", "deploy")
    alive: list[str] = []
    for step in range(400):
        roll = rng.random()
        if roll < 0.15 or not alive:
            targets = tuple(rng.sample(names, rng.randint(1, 3)))
            record = replace(
                sample_record(f"run-{step}", created_at=stamp(rng.randint(0, 50)), targets=targets),
                build=rng.choice(builds),
            )
            for one in (store, memory):
                assert isinstance(one.create_run(record), Written)
            alive.append(record.id)
        elif roll < 0.2:
            run_id = alive.pop(rng.randrange(len(alive)))
            store.delete_run(run_id)
            memory.delete_run(run_id)
        else:
            run_id = rng.choice(alive)
            delta = RunDelta(
                updated_at=stamp(100 + step),
                status=rng.choice(RUN_STATUSES) if rng.random() < 0.3 else None,
                actor=f"actor-{step}" if rng.random() < 0.1 else None,
                targets={"pad": TargetRecord(meta={"n": "x" * rng.randint(0, 600)})},
            )
            for one in (store, memory):
                stored = one.get_run(run_id)
                assert stored is not None
                assert isinstance(
                    one.append_run(run_id, delta, expected_version=stored.version), Written
                )
    queries = [RunQuery(), RunQuery(limit=3), RunQuery(since=stamp(25)), RunQuery(limit=0)]
    queries += [RunQuery(status=s) for s in RUN_STATUSES]
    queries += [RunQuery(build=b, limit=4) for b in builds]
    queries += [RunQuery(target=n, status="running") for n in names]
    for query in queries:
        assert store.list_runs(query) == memory.list_runs(query), query
    assert FileSystemStateStore(store.directory).list_runs() == memory.list_runs()


def test_common_and_rare_targets_list_alike_whichever_way_the_index_walks(
    store: FileSystemStateStore,
) -> None:
    memory = MemoryStateStore()
    for i in range(120):  # "common" is in every run: more than ten pages of a small limit
        targets = ("common", "rare") if i in (5, 80) else ("common",)
        record = sample_record(f"run-{i:03d}", created_at=stamp(i % 40), targets=targets)
        for one in (store, memory):
            assert isinstance(one.create_run(record), Written)
    for query in (
        RunQuery(target="common", limit=1),
        RunQuery(target="common", limit=15),
        RunQuery(target="common"),
        RunQuery(target="rare", limit=1),
        RunQuery(target="rare"),
    ):
        assert store.list_runs(query) == memory.list_runs(query), query


def test_a_pruned_runs_lease_taken_again_by_another_process_gets_a_greater_fence(
    directory: Path,
) -> None:
    first = FileSystemStateStore(directory)
    create(first, sample_record("run-1"))
    lease = first.acquire_lock("zuke-run-run-1", sample_holder("run-1"), 60_000)
    assert isinstance(lease, LockAcquired)
    first.release_lock("zuke-run-run-1", lease.token)
    first.delete_run("run-1")
    assert not list((directory / "locks").glob("zuke-run-run-1.*"))
    again = FileSystemStateStore(directory).acquire_lock("zuke-run-run-1", sample_holder(), 1000)
    assert isinstance(again, LockAcquired)
    assert again.fence > lease.fence


def test_list_locks_skips_an_unreadable_claim_file_with_a_warning(
    store: FileSystemStateStore, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    acquired = store.acquire_lock("deploy", sample_holder("run-1"), 60_000)
    assert isinstance(acquired, LockAcquired)
    (directory / "locks" / "broken.json").write_text("{garbage")
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        listed = store.list_locks()
    assert [(e.key, e.fence, e.holder.run_id) for e in listed] == [
        ("deploy", acquired.fence, "run-1")
    ]
    assert any("broken.json" in w for w in zuke_warnings(caplog))
