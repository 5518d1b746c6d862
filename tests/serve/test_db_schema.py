"""The service database's schema: a file from the previous version is upgraded in place."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke._errors import StateError
from zuke._serve.db import StateDb
from zuke._serve.schema import SCHEMA_VERSION

# The version-1 schema, as zuke serve wrote it before /builds and the time columns.
V1 = """
CREATE TABLE runs (ns TEXT NOT NULL, id TEXT NOT NULL, etag TEXT NOT NULL, record TEXT NOT NULL,
    build TEXT NOT NULL, root_target TEXT NOT NULL, status TEXT NOT NULL, actor TEXT NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (ns, id)) WITHOUT ROWID;
CREATE INDEX runs_newest ON runs (ns, created_at DESC, id DESC);
CREATE TABLE run_targets (ns TEXT NOT NULL, run_id TEXT NOT NULL, name TEXT NOT NULL,
    PRIMARY KEY (ns, run_id, name)) WITHOUT ROWID;
CREATE INDEX run_targets_by_name ON run_targets (ns, name);
CREATE TABLE run_deltas (ns TEXT NOT NULL, run_id TEXT NOT NULL, seq INTEGER NOT NULL,
    delta TEXT NOT NULL, PRIMARY KEY (ns, run_id, seq)) WITHOUT ROWID;
CREATE TABLE run_journal (ns TEXT NOT NULL, run_id TEXT NOT NULL, base_bytes INTEGER NOT NULL,
    journal_bytes INTEGER NOT NULL, last_seq INTEGER NOT NULL,
    PRIMARY KEY (ns, run_id)) WITHOUT ROWID;
CREATE TABLE locks (ns TEXT NOT NULL, key TEXT NOT NULL, token TEXT, holder TEXT,
    expires_at INTEGER, fence INTEGER NOT NULL, PRIMARY KEY (ns, key)) WITHOUT ROWID;
PRAGMA user_version=1;
"""


def version_1_file(path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.executescript(V1)
        for run_id, build, created in (
            ("old", "Alpha", "2026-01-14T23:00:00.000Z"),
            ("new", "Alpha", "2026-01-15T00:00:00.500Z"),
            ("other", "Beta", "2026-01-15T01:00:00.000Z"),
        ):
            conn.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, 'deploy', 'running', 'me', ?, ?)",
                ("", run_id, '"e"', "{}", build, created, created),
            )
        holder = {"actor": "me", "runId": "new", "since": "2026-01-15T00:00:00Z"}
        conn.execute(
            "INSERT INTO locks VALUES ('', 'deploy', 'tok', ?, 9999999999999, 3)",
            (json.dumps(holder),),
        )
        conn.execute("INSERT INTO locks VALUES ('', 'gone', NULL, NULL, NULL, 5)")


def test_a_version_1_file_is_upgraded_and_its_rows_can_be_filtered(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    version_1_file(path)
    db = StateDb(path, clock=ManualClock())
    try:
        since = 1_768_435_200_000  # 2026-01-15T00:00:00Z
        assert [r[0] for r in db.list_runs("", since_ms=since)] == ["other", "new"]
        assert [r[0] for r in db.list_runs("", build="Alpha")] == ["new", "old"]
        claims = db.locks.list("", run_id="new")
        assert [(c.key, c.fence) for c in claims] == [("deploy", 3)]
        assert db.builds.list("", name=None, since_ms=None) == []
    finally:
        db.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_a_file_from_a_newer_zuke_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StateError, match="newer zuke"):
        StateDb(path, clock=ManualClock())


def test_listing_uses_an_index_for_every_filter(tmp_path: Path) -> None:
    db = StateDb(tmp_path / "state.db", clock=ManualClock())
    db.close()
    with sqlite3.connect(tmp_path / "state.db") as conn:
        for where in ("status = 'running'", "build = 'B'", "created_ms >= 5", "1"):
            plan = " ".join(
                str(row[-1])
                for row in conn.execute(
                    "EXPLAIN QUERY PLAN SELECT id FROM runs WHERE ns = '' AND "
                    f"{where} ORDER BY created_ms DESC, id DESC LIMIT 20"
                )
            )
            assert "USING INDEX" in plan or "USING COVERING INDEX" in plan, (where, plan)
            assert "TEMP B-TREE" not in plan, (where, plan)
