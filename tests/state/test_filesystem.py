"""FileSystemStateStore specifics the shared contract cannot see: the on-disk journal,
corruption, torn appends, compaction, linear cost, permissions and the mutex timeout."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from functools import reduce
from pathlib import Path

import filelock
import pytest

from zuke._clock import ManualClock
from zuke._errors import CorruptRecordError, StateError, StoreUnavailableError, UnsafeIdError
from zuke.state import _journal
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, RunQuery, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import (
    RunDelta,
    RunEvent,
    RunRecord,
    TargetRecord,
    apply_delta,
    apply_deltas,
)
from zuke.testing.store_contract import rich_record, sample_holder, sample_record


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def store(directory: Path) -> FileSystemStateStore:
    return FileSystemStateStore(directory, clock=ManualClock())


def created(store: FileSystemStateStore, record: RunRecord) -> str:
    result = store.create_run(record)
    assert isinstance(result, Written)
    return result.version


def appended(store: FileSystemStateStore, run_id: str, delta: RunDelta, version: str) -> str:
    result = store.append_run(run_id, delta, expected_version=version)
    assert isinstance(result, Written)
    return result.version


def step(i: int, target: str = "build") -> RunDelta:
    return RunDelta(
        updated_at=f"2026-01-02T05:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
        targets={target: TargetRecord(status="running", meta={"step": i})},
        events=(RunEvent(at=f"2026-01-02T05:00:00.{i:03d}Z", tool="step", actor="engine"),),
    )


def lines(path: Path) -> list[bytes]:
    return path.read_bytes().split(b"\n")


# ---------------------------------------------------------------- layout


def test_a_run_is_one_journal_file_with_a_header_and_a_compact_record_line(
    store: FileSystemStateStore, directory: Path
) -> None:
    record = rich_record("run-1")
    version = created(store, record)
    raw = lines(directory / "run-1.jsonl")
    assert raw[-1] == b"", "every line ends in a newline"
    header = json.loads(raw[0])
    assert header == {"zuke": "run-journal", "v": 1, "gen": header["gen"], "base": len(raw[1]) + 1}
    assert json.loads(raw[1])["x-future-field"] == {"nested": [1, "two", None]}
    assert len(raw) == 3
    assert version == f"{header['gen']}:{(directory / 'run-1.jsonl').stat().st_size}"


def test_an_append_adds_exactly_one_line(store: FileSystemStateStore, directory: Path) -> None:
    version = created(store, sample_record("run-1"))
    before = (directory / "run-1.jsonl").read_bytes()
    appended(store, "run-1", step(1), version)
    after = (directory / "run-1.jsonl").read_bytes()
    assert after.startswith(before)
    assert after[len(before) :] == _journal.delta_line(step(1))


def test_the_directory_is_created_on_first_write_and_not_by_reads(
    store: FileSystemStateStore, directory: Path
) -> None:
    assert store.get_run("run-1") is None
    assert store.list_runs() == []
    store.delete_run("run-1")
    assert store.renew_lock("k", "t", 1000) is False
    store.release_lock("k", "t")
    assert not directory.exists()
    created(store, sample_record("run-1"))
    assert (directory / "run-1.jsonl").is_file()


def test_delete_keeps_a_live_lease_of_the_run(store: FileSystemStateStore, directory: Path) -> None:
    created(store, sample_record("run-1"))
    acquired = store.acquire_lock("zuke-run-run-1", sample_holder("run-1"), 60_000)
    assert isinstance(acquired, LockAcquired)
    store.delete_run("run-1")
    assert not (directory / "run-1.jsonl").exists()
    assert (directory / "locks" / "zuke-run-run-1.json").exists()
    assert isinstance(store.acquire_lock("zuke-run-run-1", sample_holder(), 1000), LockHeld)


def test_delete_leaves_no_file_of_a_finished_run_behind(
    store: FileSystemStateStore, directory: Path
) -> None:
    created(store, sample_record("run-1"))
    lease = store.acquire_lock("zuke-run-run-1", sample_holder("run-1"), 60_000)
    other = store.acquire_lock("deploy", sample_holder("run-1"), 60_000)
    assert isinstance(lease, LockAcquired) and isinstance(other, LockAcquired)
    store.release_lock("zuke-run-run-1", lease.token)
    store.release_lock("deploy", other.token)
    store.delete_run("run-1")
    left = sorted(p.relative_to(directory).as_posix() for p in directory.rglob("*") if p.is_file())
    per_run = [name for name in left if "run-1" in name]
    assert per_run == []
    # Other keys keep their fence; the store-wide files are the fence floor and the index.
    assert [name for name in left if not name.startswith("index/")] == [
        "locks/@fence-floor",
        "locks/@fence-floor.lock",
        "locks/deploy.fence",
        "locks/deploy.lock",
    ]


def test_release_removes_the_claim_but_keeps_the_fence(
    store: FileSystemStateStore, directory: Path
) -> None:
    first = store.acquire_lock("deploy", sample_holder(), 60_000)
    assert isinstance(first, LockAcquired)
    claim = json.loads((directory / "locks" / "deploy.json").read_text())
    assert claim["token"] == first.token
    assert claim["fence"] == first.fence
    assert claim["holder"] == {
        "actor": "contract-suite",
        "runId": "run-1",
        "since": claim["holder"]["since"],
    }
    assert claim["expiresAt"] == store.clock.now_ms() + 60_000
    store.release_lock("deploy", first.token)
    assert not (directory / "locks" / "deploy.json").exists()
    # A new store instance (a new process) continues the sequence from disk.
    second = FileSystemStateStore(directory).acquire_lock("deploy", sample_holder(), 60_000)
    assert isinstance(second, LockAcquired)
    assert second.fence == first.fence + 1


def test_an_unsafe_id_never_touches_the_filesystem(tmp_path: Path) -> None:
    store = FileSystemStateStore(tmp_path / "a" / "runs")
    for bad in ("../escape", "../../etc/passwd", "x/../../y"):
        with pytest.raises(UnsafeIdError, match="unsafe run id"):
            store.create_run(sample_record(bad))
        with pytest.raises(UnsafeIdError, match="unsafe lock key"):
            store.acquire_lock(bad, sample_holder(), 1000)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- corruption


@pytest.mark.parametrize(
    ("content", "complaint"),
    [
        (b"this is not json\n", "line 1 is not a run-journal header"),
        (b'{"zuke":"run-journal","v":1,"gen":"g","base":3}\n{"id":\n', "line 2 is not valid JSON"),
        (b'{"zuke":"run-journal","v":9,"gen":"g","base":3}\n{}\n', "v9 is not supported"),
        (b'{"zuke":"run-journal","v":1,"gen":"g","base":3}\n', "the record line is missing"),
        (b"", "empty run journal"),
    ],
)
def test_get_of_a_corrupt_file_raises_naming_the_run_and_file(
    store: FileSystemStateStore, directory: Path, content: bytes, complaint: str
) -> None:
    directory.mkdir()
    (directory / "bad-run.jsonl").write_bytes(content)
    with pytest.raises(CorruptRecordError) as caught:
        store.get_run("bad-run")
    message = str(caught.value)
    assert "'bad-run'" in message
    assert str(directory / "bad-run.jsonl") in message
    assert complaint in message


def test_a_corrupt_delta_line_is_reported_with_its_line_number(
    store: FileSystemStateStore, directory: Path
) -> None:
    version = created(store, sample_record("run-1"))
    appended(store, "run-1", step(1), version)
    with (directory / "run-1.jsonl").open("ab") as f:
        f.write(b'{"updatedAt":"x","status":"exploded"}\n')
    with pytest.raises(CorruptRecordError, match=r"run-1.*line 4.*\"status\""):
        store.get_run("run-1")


def test_a_record_whose_id_does_not_match_its_file_is_corrupt(
    store: FileSystemStateStore, directory: Path
) -> None:
    created(store, sample_record("run-1"))
    os.rename(directory / "run-1.jsonl", directory / "run-2.jsonl")
    with pytest.raises(CorruptRecordError, match=r"'run-2'.*holds a record with id 'run-1'"):
        store.get_run("run-2")


def test_list_skips_and_reports_corrupt_files_and_returns_the_others(
    store: FileSystemStateStore, directory: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        created(store, sample_record(f"run-{i}", created_at=f"2026-01-0{i + 1}T00:00:00.000Z"))
    # Files that no store wrote are found when the index is built from the journals.
    shutil.rmtree(directory / "index")
    (directory / "broken.jsonl").write_bytes(b"{ nope\n")
    (directory / "bad id.jsonl").write_bytes(b"")
    (directory / "run-9.jsonl.tmp-0123abcd").write_bytes(b"half a temp file")  # crash leftover
    (directory / "notes.txt").write_text("not a run")
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        listed = store.list_runs()
    assert [s.id for s in listed] == ["run-2", "run-1", "run-0"]
    warned = [r.getMessage() for r in caplog.records if r.name == "zuke.state"]
    assert len(warned) == 2, warned
    assert any("broken.jsonl" in w for w in warned)
    assert any("bad id.jsonl" in w for w in warned)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zuke.state"):
        assert [s.id for s in store.list_runs()] == ["run-2", "run-1", "run-0"]
    assert [r for r in caplog.records if r.name == "zuke.state"] == []  # the index has them


def test_a_corrupt_lock_file_is_reported_not_overwritten(
    store: FileSystemStateStore, directory: Path
) -> None:
    (directory / "locks").mkdir(parents=True)
    (directory / "locks" / "deploy.json").write_text("{garbage")
    with pytest.raises(CorruptRecordError, match=r"lock 'deploy'.*delete the file"):
        store.acquire_lock("deploy", sample_holder(), 1000)
    assert (directory / "locks" / "deploy.json").read_text() == "{garbage"


# ---------------------------------------------------------------- torn appends


def test_a_torn_trailing_line_is_ignored_and_cut_off_by_the_next_append(
    store: FileSystemStateStore, directory: Path
) -> None:
    record = sample_record("run-1")
    version = appended(store, "run-1", step(1), created(store, record))
    path = directory / "run-1.jsonl"
    whole = path.read_bytes()
    # A process killed mid-append leaves part of a line and no newline.
    path.write_bytes(whole + _journal.delta_line(step(2))[:25])
    stored = store.get_run("run-1")
    assert stored is not None
    assert stored.record == apply_delta(record, step(1))
    assert stored.version == version
    assert store.list_runs()[0].updated_at == step(1).updated_at
    # The torn fragment does not poison the journal: the next append replaces it.
    version = appended(store, "run-1", step(3), version)
    assert path.read_bytes() == whole + _journal.delta_line(step(3))
    stored = store.get_run("run-1")
    assert stored is not None
    assert stored.record == apply_delta(apply_delta(record, step(1)), step(3))
    assert stored.version == version


def test_a_torn_tail_does_not_change_the_version_a_put_expects(
    store: FileSystemStateStore, directory: Path
) -> None:
    version = created(store, sample_record("run-1"))
    with (directory / "run-1.jsonl").open("ab") as f:
        f.write(b'{"updatedAt":')
    assert isinstance(
        store.put_run(sample_record("run-1", status="failed"), expected_version=version), Written
    )


# ---------------------------------------------------------------- compaction and linear cost


def test_compaction_rewrites_the_journal_to_the_same_folded_record(
    store: FileSystemStateStore, directory: Path
) -> None:
    record = sample_record("run-1", targets=tuple(f"t{i}" for i in range(20)))
    version = created(store, record)
    first_gen = version.split(":")[0]
    deltas: list[RunDelta] = []
    path = directory / "run-1.jsonl"
    while version.split(":")[0] == first_gen:
        deltas.append(step(len(deltas), target=f"t{len(deltas) % 20}"))
        version = appended(store, "run-1", deltas[-1], version)
        assert len(deltas) < 5000, "never compacted"
    # Compaction happened on the append that crossed the threshold: two lines left.
    assert len(lines(path)) == 3
    assert path.stat().st_size < _journal.COMPACT_MIN_BYTES
    expected = reduce(apply_delta, deltas, record)
    stored = store.get_run("run-1")
    assert stored is not None
    assert stored.record == expected
    assert stored.version == version
    # and appending continues on the compacted base
    version = appended(store, "run-1", step(9999, "t0"), version)
    stored = store.get_run("run-1")
    assert stored is not None
    assert stored.record == apply_delta(expected, step(9999, "t0"))


def test_folding_a_journal_equals_applying_each_delta(store: FileSystemStateStore) -> None:
    record = rich_record("run-1")
    deltas = [step(i, target=("build", "deploy")[i % 2]) for i in range(30)]
    deltas[7] = replace(deltas[7], status="failed", degraded=False, actor="z")
    deltas[9] = replace(deltas[9], deadline_at="later", intended_terminal="failed")
    assert apply_deltas(record, deltas) == reduce(apply_delta, deltas, record)
    assert apply_deltas(record, []) is record


def test_bytes_written_for_n_appends_grow_linearly(store: FileSystemStateStore) -> None:
    record = sample_record("run-1", targets=tuple(f"t{i}" for i in range(200)))
    version = created(store, record)
    start = store.bytes_written
    payload = 0
    n = 2000
    for i in range(n):
        delta = step(i, target=f"t{i % 200}")
        payload += len(_journal.delta_line(delta))
        version = appended(store, "run-1", delta, version)
    written = store.bytes_written - start
    stored = store.get_run("run-1")
    assert stored is not None
    final = len(_journal.compacted(stored.record)[0])
    # Appends write the payload once; compactions, each paid for by at least a
    # base's worth of appends, at most twice more.
    assert written <= 3 * payload
    # A store that rewrote the record per transition would write ~n/2 records' worth.
    assert written < n * final / 20


# ---------------------------------------------------------------- unusable directories


def test_a_directory_that_cannot_be_created_names_it_and_the_fix(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("I am a file, not a directory")
    store = FileSystemStateStore(blocker / "runs")
    with pytest.raises(StateError) as caught:
        store.create_run(sample_record("run-1"))
    message = str(caught.value)
    assert str(blocker / "runs") in message
    assert "ZUKE_STATE_DIR" in message
    assert "permissions" in message
    with pytest.raises(StoreUnavailableError, match="ZUKE_STATE_DIR"):
        store.acquire_lock("k", sample_holder(), 1000)


_READ_ONLY_CHILD = textwrap.dedent(
    """
    import os, sys, tempfile
    from zuke.state.filesystem import FileSystemStateStore
    from zuke.testing.store_contract import sample_record, sample_holder

    def attempts(store):
        return (
            lambda: store.create_run(sample_record("run-new")),
            lambda: store.acquire_lock("k", sample_holder(), 1000),
        )

    # Warm up while still root: the interpreter lives where `nobody` cannot read,
    # so every lazily imported module must be loaded before privileges go.
    for call in attempts(FileSystemStateStore(tempfile.mkdtemp())):
        call()
    os.setgid(65534)
    os.setuid(65534)
    store = FileSystemStateStore(sys.argv[1])
    assert not os.access(sys.argv[1], os.W_OK)
    assert store.get_run("existing") is not None, "reads must still work"
    for call in attempts(store):
        try:
            call()
        except BaseException as exc:
            print(type(exc).__name__, exc, sep="|")
        else:
            print("no error")
    """
)


@pytest.fixture
def read_only_directory() -> Iterator[Path]:
    """A store directory holding one run, mode 0o555: readable by all, writable only by root."""
    base = Path(tempfile.mkdtemp(prefix="zuke-ro-"))
    try:
        base.chmod(0o755)
        directory = base / "runs"
        created(FileSystemStateStore(directory), sample_record("existing"))
        (directory / "existing.lock").unlink()
        directory.chmod(0o555)
        yield directory
    finally:
        (base / "runs").chmod(0o755)
        subprocess.run(["rm", "-rf", str(base)], check=True)


def test_a_read_only_directory_gives_a_state_error_naming_it(read_only_directory: Path) -> None:
    """A real EACCES. Root ignores modes, so as root a child drops to `nobody` and tries."""
    if os.geteuid() == 0:
        child = subprocess.run(
            [sys.executable, "-c", _READ_ONLY_CHILD, str(read_only_directory)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        outcomes = child.stdout.splitlines()
    else:
        assert not os.access(read_only_directory, os.W_OK)
        outcomes = []
        store = FileSystemStateStore(read_only_directory)
        for call in (
            lambda: store.create_run(sample_record("run-new")),
            lambda: store.acquire_lock("k", sample_holder(), 1000),
        ):
            with pytest.raises(StateError) as caught:
                call()
            outcomes.append(f"{type(caught.value).__name__}|{caught.value}")
    assert len(outcomes) == 2, outcomes
    for outcome in outcomes:
        kind, message = outcome.split("|", 1)
        assert kind == "StoreUnavailableError", outcome
        assert str(read_only_directory) in message
        assert "Permission denied" in message
        assert "ZUKE_STATE_DIR" in message


# ---------------------------------------------------------------- the mutex


def test_a_run_mutex_held_too_long_gives_store_unavailable(directory: Path) -> None:
    store = FileSystemStateStore(directory, mutex_timeout_s=0.05)
    version = created(store, sample_record("run-1"))
    holder = filelock.FileLock(str(directory / "run-1.lock"))
    with holder:
        for call in (
            lambda: store.put_run(sample_record("run-1"), expected_version=version),
            lambda: store.append_run("run-1", step(1), expected_version=version),
            lambda: store.create_run(sample_record("run-1")),
            lambda: store.delete_run("run-1"),
        ):
            with pytest.raises(StoreUnavailableError) as caught:
                call()
            assert str(directory / "run-1.lock") in str(caught.value)
            assert "retry" in str(caught.value)
        stored = store.get_run("run-1")  # reads never wait for the mutex
        assert stored is not None
    assert isinstance(store.put_run(sample_record("run-1"), expected_version=version), Written)


def test_a_lock_key_mutex_held_too_long_gives_store_unavailable(directory: Path) -> None:
    store = FileSystemStateStore(directory, mutex_timeout_s=0.05)
    (directory / "locks").mkdir(parents=True)
    with (
        filelock.FileLock(str(directory / "locks" / "deploy.lock")),
        pytest.raises(StoreUnavailableError, match=r"locks/deploy\.lock"),
    ):
        store.acquire_lock("deploy", sample_holder(), 1000)
    assert isinstance(store.acquire_lock("deploy", sample_holder(), 1000), LockAcquired)


def test_a_second_store_on_the_same_directory_sees_every_write(directory: Path) -> None:
    one, two = FileSystemStateStore(directory), FileSystemStateStore(directory)
    version = created(one, sample_record("run-1"))
    version = appended(two, "run-1", step(1), version)
    assert isinstance(one.append_run("run-1", step(2), expected_version="stale:0"), Conflict)
    appended(one, "run-1", step(2), version)
    assert [s.id for s in two.list_runs(RunQuery(target="build"))] == ["run-1"]


def test_a_lock_is_live_until_its_expiry_instant_and_free_from_it(directory: Path) -> None:
    clock = ManualClock()
    store = FileSystemStateStore(directory, clock=clock)
    first = store.acquire_lock("k", sample_holder("a"), 1000)
    assert isinstance(first, LockAcquired)
    clock.advance(999)
    assert store.acquire_lock("k", sample_holder("b"), 1000) == LockHeld(holder=sample_holder("a"))
    clock.advance(1)  # now == expiresAt: expired
    second = store.acquire_lock("k", sample_holder("b"), 1000)
    assert isinstance(second, LockAcquired)
    assert second.fence == first.fence + 1


def test_a_record_line_with_a_bad_field_names_the_run_file_and_field(
    store: FileSystemStateStore, directory: Path
) -> None:
    created(store, sample_record("run-1"))
    path = directory / "run-1.jsonl"
    path.write_bytes(path.read_bytes().replace(b'"status":"running"', b'"status":"exploded"'))
    with pytest.raises(CorruptRecordError) as caught:
        store.get_run("run-1")
    assert "'run-1'" in str(caught.value)
    assert str(path) in str(caught.value)
    assert '"status" is "exploded"' in str(caught.value)
