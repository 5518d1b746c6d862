"""The filesystem store keeps its last journal open between appends (``zuke.state._fs_open``).

Each append is still a compare-and-swap on the journal's version: these tests
change the journal behind the kept descriptor the ways another process can
(an append, a compaction's rename, a deletion, a crashed appender's torn tail,
an in-place rewrite) and check the next append sees it, as it did when every
append re-read the header.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from zuke import StoreUnavailableError
from zuke.state import _journal
from zuke.state._files import try_mutex
from zuke.state._protocol import Conflict, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord

STAMP = "2026-12-01T00:00:00.000Z"


def record() -> RunRecord:
    return RunRecord(
        id="run-1", build="B", root_target="t1", status="running", actor="me",
        created_at=STAMP, updated_at=STAMP, targets={"t0": TargetRecord(), "t1": TargetRecord()},
    )  # fmt: skip


def delta(i: int) -> RunDelta:
    return RunDelta(updated_at=STAMP, targets={"t0": TargetRecord(meta={"step": i})})


def created(store: FileSystemStateStore) -> str:
    written = store.create_run(record())
    assert isinstance(written, Written)
    return written.version


def append(store: FileSystemStateStore, version: str, i: int) -> str:
    written = store.append_run("run-1", delta(i), expected_version=version)
    assert isinstance(written, Written), written
    return written.version


def test_appends_in_a_row_read_the_journal_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes = 0
    real = _journal.probe_fd

    def counted(*args: object) -> _journal.Probe:
        nonlocal probes
        probes += 1
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_journal, "probe_fd", counted)
    store = FileSystemStateStore(tmp_path)
    version = created(store)
    for i in range(5):
        version = append(store, version, i)
    assert probes == 1  # the first append read the header; the rest knew it
    stored = store.get_run("run-1")
    assert stored is not None and stored.version == version
    assert stored.record.targets["t0"].meta == {"step": 4}


def test_another_writers_append_makes_an_old_version_conflict(tmp_path: Path) -> None:
    ours, theirs = FileSystemStateStore(tmp_path), FileSystemStateStore(tmp_path)
    version = append(ours, created(ours), 0)  # ours now keeps the journal open
    newer = append(theirs, version, 1)
    assert isinstance(ours.append_run("run-1", delta(2), expected_version=version), Conflict)
    append(ours, newer, 3)  # at the version the other writer left, ours appends again
    stored = ours.get_run("run-1")
    assert stored is not None and stored.record.targets["t0"].meta == {"step": 3}


def test_a_rename_over_the_journal_is_seen(tmp_path: Path) -> None:
    """A ``put_run`` (or a compaction) by another process renames a new file in."""
    ours, theirs = FileSystemStateStore(tmp_path), FileSystemStateStore(tmp_path)
    version = append(ours, created(ours), 0)
    rewritten = theirs.put_run(record(), expected_version=version)
    assert isinstance(rewritten, Written)
    assert isinstance(ours.append_run("run-1", delta(1), expected_version=version), Conflict)
    append(ours, rewritten.version, 2)
    stored = theirs.get_run("run-1")
    assert stored is not None and stored.record.targets["t0"].meta == {"step": 2}


def test_a_deleted_journal_is_a_conflict_not_a_write_to_the_unlinked_file(
    tmp_path: Path,
) -> None:
    ours, theirs = FileSystemStateStore(tmp_path), FileSystemStateStore(tmp_path)
    version = append(ours, created(ours), 0)
    theirs.delete_run("run-1")
    assert isinstance(ours.append_run("run-1", delta(1), expected_version=version), Conflict)
    assert theirs.get_run("run-1") is None


def test_a_torn_tail_left_behind_the_kept_descriptor_is_cut_first(tmp_path: Path) -> None:
    """A writer that died mid-append left half a line: the next append cuts it off."""
    store = FileSystemStateStore(tmp_path)
    version = append(store, created(store), 0)
    path = store.path_of("run-1")
    with open(path, "ab") as f:
        f.write(b'{"updatedAt":"2026-12-01T00:00:00.000Z","tar')  # no newline: torn
    version = append(store, version, 1)
    stored = store.get_run("run-1")
    assert stored is not None and stored.version == version
    assert stored.record.targets["t0"].meta == {"step": 1}
    assert Path(path).read_bytes().endswith(b"\n")


def test_an_in_place_rewrite_of_the_same_size_is_reread(tmp_path: Path) -> None:
    """Same inode, same size, other bytes (an in-place copy): the times differ, so the
    header is read again and the journal's new ``gen`` makes the old version conflict."""
    store = FileSystemStateStore(tmp_path)
    version = append(store, created(store), 0)
    path = store.path_of("run-1")
    data = Path(path).read_bytes()
    gen = _journal.gen_of(version)
    other = gen[::-1]
    assert other != gen
    st = os.stat(path)
    with open(path, "r+b") as f:  # rewrite in place, keeping the inode
        f.write(data.replace(gen.encode(), other.encode()))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # as a later write's
    assert os.stat(path).st_ino == st.st_ino and os.stat(path).st_size == st.st_size
    assert isinstance(store.append_run("run-1", delta(1), expected_version=version), Conflict)
    append(store, _journal.version_of(other, len(data)), 2)


# -- the run's mutex, kept open with the journal ------------------------------------------


def test_appends_in_a_row_open_the_mutex_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileSystemStateStore(tmp_path)
    version = created(store)
    opened: list[str] = []
    real_open = os.open

    def counted(path: str, *args: int) -> int:
        opened.append(os.fspath(path))
        return real_open(path, *args)

    monkeypatch.setattr(os, "open", counted)
    for i in range(5):
        version = append(store, version, i)
    assert [p for p in opened if p.endswith(".lock")] == [store.mutex_path("run-1")]
    assert [p for p in opened if p.endswith(".jsonl")] == [store.path_of("run-1")]


def test_a_run_deleted_and_made_again_is_written_under_its_new_mutex(tmp_path: Path) -> None:
    """Another process deletes the run (its journal, then its mutex file) and creates it
    again: the descriptor kept of the old mutex file excludes nobody now, so the next
    append must wait for the new one's holder, not write beside it."""
    ours = FileSystemStateStore(tmp_path, mutex_timeout_s=0.05)
    theirs = FileSystemStateStore(tmp_path)
    append(ours, created(ours), 0)  # ours keeps the journal and the mutex file open
    theirs.delete_run("run-1")
    again = theirs.create_run(record())
    assert isinstance(again, Written)
    refused = pytest.raises(StoreUnavailableError, match="could not take the mutex")
    with theirs._run_mutex("run-1"), refused:  # the new mutex file, held by the other process
        ours.append_run("run-1", delta(1), expected_version=again.version)
    append(ours, again.version, 2)  # free again: ours appends to the new journal
    stored = theirs.get_run("run-1")
    assert stored is not None and stored.record.targets["t0"].meta == {"step": 2}


def test_a_mutex_held_elsewhere_is_waited_for_through_its_path(tmp_path: Path) -> None:
    ours = FileSystemStateStore(tmp_path, mutex_timeout_s=0.05)
    theirs = FileSystemStateStore(tmp_path)
    version = append(ours, created(ours), 0)
    refused = pytest.raises(StoreUnavailableError, match="could not take the mutex")
    with theirs._run_mutex("run-1"), refused:  # the kept descriptor's flock is refused
        ours.append_run("run-1", delta(1), expected_version=version)
    version = append(ours, version, 2)
    version = append(ours, version, 3)  # and kept again
    stored = ours.get_run("run-1")
    assert stored is not None and stored.version == version


def test_a_compaction_under_the_kept_mutex_holds_it_until_the_record_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal, "COMPACT_MIN_BYTES", 256)
    store = FileSystemStateStore(tmp_path)
    other = FileSystemStateStore(tmp_path)
    held_during_write: list[bool] = []
    real = store._write_whole

    def watching(path: str, rec: RunRecord) -> Written:
        with try_mutex(other.mutex_path("run-1")) as free:  # what another process would get
            held_during_write.append(not free)
        return real(path, rec)

    monkeypatch.setattr(store, "_write_whole", watching)
    version = created(store)
    for i in range(12):
        version = append(store, version, i)
    assert held_during_write and all(held_during_write)  # never written unguarded
    stored = other.get_run("run-1")
    assert stored is not None and stored.version == version
