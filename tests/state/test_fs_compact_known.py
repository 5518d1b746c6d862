"""A compaction due on an append writes the record ``update_run`` already made.

``update_run`` applies the delta to the record it holds at ``expected_version``;
the filesystem store appends only when that version matches, so the record
it is handed is exactly the journal's once the line is appended, and a
compaction writes it instead of reading back and parsing the whole journal.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from zuke.state import _journal
from zuke.state._journal import encode_line
from zuke.state._protocol import Conflict, StoredRun, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord
from zuke.state.update import Updated, update_run
from zuke.state.wire import record_to_json

STAMP = "2026-12-01T00:00:00.000Z"


def record(n: int) -> RunRecord:
    return RunRecord(
        id="run-1", build="B", root_target=f"t{n - 1}", status="running", actor="me",
        created_at=STAMP, updated_at=STAMP,
        targets={f"t{i}": TargetRecord() for i in range(n)},
    )  # fmt: skip


def _always(delta: RunDelta) -> Callable[[RunRecord], RunDelta]:
    return lambda fresh: delta


def test_compactions_from_the_known_record_read_back_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_journal, "COMPACT_MIN_BYTES", 1024)  # compact often
    store = FileSystemStateStore(tmp_path)
    reads = 0
    real_get = store.get_run

    def counted_get(run_id: str) -> StoredRun | None:
        nonlocal reads
        reads += 1
        return real_get(run_id)

    monkeypatch.setattr(store, "get_run", counted_get)
    first = record(40)
    created = store.create_run(first)
    assert isinstance(created, Written)
    known = StoredRun(first, created.version)
    gens = {_journal.gen_of(created.version)}
    for i in range(40):
        meta = {"step": i, "list": [1, 2.5, "x"], "nested": {"k": None, "t": (1, 2)}}
        row = TargetRecord(status="succeeded", started_at=STAMP, ended_at=STAMP, meta=meta)
        delta = RunDelta(updated_at=STAMP, targets={f"t{i}": row})
        result = update_run(store, "run-1", _always(delta), known=known)
        assert isinstance(result, Updated)
        known = StoredRun(result.record, result.version)
        gens.add(_journal.gen_of(result.version))
    assert len(gens) >= 3  # compactions happened...
    assert reads == 0  # ...and none read the journal back
    stored = real_get("run-1")
    assert stored is not None and stored.version == known.version
    # What was written is what the journal holds: the same JSON, line for line.
    assert encode_line(record_to_json(stored.record)) == encode_line(record_to_json(known.record))
    assert stored.record.targets["t39"].meta["nested"] == {"k": None, "t": [1, 2]}


def test_a_store_that_cannot_take_the_known_record_is_appended_to_as_before(
    tmp_path: Path,
) -> None:
    """``update_run`` hands the record only to a store with ``append_run_known``."""
    appended: list[RunDelta] = []

    class Plain(FileSystemStateStore):
        append_run_known = None  # type: ignore[assignment]

        def append_run(
            self, run_id: str, delta: RunDelta, *, expected_version: str
        ) -> Written | Conflict:
            appended.append(delta)
            return FileSystemStateStore.append_run_known(
                self, run_id, delta, expected_version=expected_version
            )

    store = Plain(tmp_path)
    first = record(2)
    created = store.create_run(first)
    assert isinstance(created, Written)
    delta = RunDelta(updated_at=STAMP, targets={"t0": TargetRecord(status="running")})
    result = update_run(
        store, "run-1", lambda fresh: delta, known=StoredRun(first, created.version)
    )
    assert isinstance(result, Updated) and appended == [delta]
