"""The runs page: keyset paging over the listing's indexes, on SQLite and on Postgres.

Walking the pages returns every run exactly once in the listing's order —
runs created in the same millisecond, and runs whose ``createdAt`` is no
instant (listed last), included — and each page asks the database for a
page and one more row, however deep it is (O(result)). The starter filter,
which has no index, reads at most its budget per page and says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.ui.support import release
from zuke._clock import SYSTEM_CLOCK
from zuke._serve.backend import ServeDb
from zuke._serve.schema import created_ms
from zuke._serve.ui import queries
from zuke._serve.ui.queries import BadQuery, RunsFilter, parse_cursor, runs_page
from zuke.state.records import RunRecord
from zuke.state.wire import record_to_json

NOW = 1_800_000_000_000


# the subject here is paging, not migrating: each test's database comes at the schema
pytestmark = pytest.mark.pg_migrated


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServeDb]:
    from zuke._serve.db_choice import open_db

    spec: Any = tmp_path / "state.db"
    if request.param == "postgres":
        spec = request.getfixturevalue("pg_url")
    opened = open_db(spec, clock=SYSTEM_CLOCK, wait_s=10.0, connections=2)
    try:
        yield opened
    finally:
        opened.close()


def add(db: ServeDb, record: RunRecord) -> None:
    assert db.create_run("", record, json.dumps(record_to_json(record))) is not None


def fill(db: ServeDb) -> list[str]:
    """43 runs: pairs created in the same millisecond, three undated; their listing order."""
    records = []
    for i in range(40):
        at = f"2026-03-01T10:{i // 2:02d}:00.000Z"  # two runs a minute: ties on created_ms
        status = "suspended" if i % 4 == 0 else "succeeded"
        records.append(
            release(
                f"run-{i:02d}",
                status=status,
                created_at=at,
                actor=["alice", "bob", "carol"][i % 3],
                build="Release" if i % 2 else "Hotfix",
            )
        )
    records += [
        release(f"odd-{i}", status="succeeded", created_at=f"last week {i}") for i in range(3)
    ]
    for r in records:
        add(db, r)
    dated = sorted(
        (r for r in records if created_ms(r.created_at) is not None),
        key=lambda r: (created_ms(r.created_at), r.id),
        reverse=True,
    )
    undated = sorted(
        (r for r in records if created_ms(r.created_at) is None), key=lambda r: r.id, reverse=True
    )
    return [r.id for r in dated + undated]


def walk(db: ServeDb, f: RunsFilter, monkeypatch: pytest.MonkeyPatch, size: int) -> list[str]:
    monkeypatch.setattr(queries, "PAGE_SIZE", size)
    seen: list[str] = []
    while True:
        page = runs_page(db, "", f, now_ms=NOW)
        seen += [r.id for r in page.rows]
        if page.next_cursor is None:
            return seen
        f = RunsFilter(**{**f.__dict__, "before": parse_cursor(page.next_cursor)})


@pytest.mark.parametrize("size", [1, 2, 7, 50])
def test_walking_the_pages_lists_every_run_once_in_order(
    db: ServeDb, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    order = fill(db)
    assert walk(db, RunsFilter(), monkeypatch, size) == order


def test_filters_hold_on_every_page(db: ServeDb, monkeypatch: pytest.MonkeyPatch) -> None:
    order = fill(db)
    expected = [
        i
        for i in order
        if i.startswith("run-")
        and int(i[4:]) % 4 == 0
        and int(i[4:]) % 2 == 0
        and int(i[4:]) // 2 >= 10
    ]
    f = RunsFilter(status="suspended", build="Hotfix", since="2026-03-01T10:10:00Z")
    assert walk(db, f, monkeypatch, 3) == expected


def test_the_starter_filter_matches_across_pages(
    db: ServeDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = fill(db)
    carols = [i for i in order if i.startswith("run-") and int(i[4:]) % 3 == 2]
    assert walk(db, RunsFilter(starter="Carol"), monkeypatch, 4) == carols  # any case


def test_the_starter_filter_stops_at_its_budget_and_says_where(
    db: ServeDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = fill(db)
    monkeypatch.setattr(queries, "SCAN_BUDGET", 10)
    monkeypatch.setattr(queries, "SCAN_CHUNK", 5)
    page = runs_page(db, "", RunsFilter(starter="nobody"), now_ms=NOW)
    assert page.rows == [] and page.next_cursor is not None
    assert page.scanned_to == "2026-03-01T10:15:00.000Z"  # the tenth run in the listing
    after = runs_page(
        db, "", RunsFilter(starter="nobody", before=parse_cursor(page.next_cursor)), now_ms=NOW
    )
    assert after.scanned_to == "2026-03-01T10:10:00.000Z"  # ten further back
    assert order[19] == "run-20"


class Counting:
    """A database that records how many rows each listing asked for."""

    def __init__(self, db: ServeDb) -> None:
        self._db = db
        self.limits: list[int | None] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def list_runs(self, ns: str, **kwargs: Any) -> Any:
        self.limits.append(kwargs.get("limit"))
        return self._db.list_runs(ns, **kwargs)


def test_a_deep_page_asks_for_one_page_of_rows(
    db: ServeDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    order = fill(db)
    monkeypatch.setattr(queries, "PAGE_SIZE", 5)
    counting = Counting(db)
    place = parse_cursor(f"{created_ms('2026-03-01T10:02:00.000Z')}:{order[35]}")
    page = runs_page(counting, "", RunsFilter(before=place), now_ms=NOW)
    assert counting.limits == [6]
    assert [r.id for r in page.rows] == order[36:41]


def test_a_page_reads_the_records_of_unfinished_runs_only(
    db: ServeDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(db)
    # Which records, not how fast: the read budget (0.25 s) cut the reads short on a
    # loaded machine; the budget has tests of its own.
    monkeypatch.setattr(queries, "READ_BUDGET_S", 60.0)
    reads: list[str] = []
    counting = Counting(db)

    def get_run(ns: str, run_id: str) -> Any:
        reads.append(run_id)
        return db.get_run(ns, run_id)

    monkeypatch.setattr(counting, "get_run", get_run, raising=False)
    page = runs_page(counting, "", RunsFilter(), now_ms=NOW)
    suspended = [r for r in page.rows if r.status == "suspended"]
    assert sorted(reads) == sorted(r.id for r in suspended)
    assert all(r.at[0].name == "approve" and r.at[0].detail == "signal:approved" for r in suspended)
    assert all(r.parked_ms == created_ms(r.created_at) for r in suspended)


@pytest.mark.parametrize("text", ["x", "12", "12:../etc", "u:", ":run-1", "9" * 30 + ":run-1"])
def test_a_cursor_that_names_no_place_is_refused(text: str) -> None:
    with pytest.raises(BadQuery):
        parse_cursor(text)


def test_the_keyset_condition_is_answered_from_the_index_on_sqlite(tmp_path: Path) -> None:
    from zuke._serve.db import StateDb

    db = StateDb(tmp_path / "s.db", clock=SYSTEM_CLOCK)
    try:
        with db._pool.conn() as conn:
            plan = " ".join(
                str(row)
                for row in conn.execute(
                    "EXPLAIN QUERY PLAN SELECT id FROM runs r WHERE r.ns = ? AND r.status = ?"
                    " AND (r.created_ms, r.id) < (?, ?) ORDER BY r.created_ms DESC, r.id DESC"
                    " LIMIT 51",
                    ("", "suspended", 1, "x"),
                )
            )
    finally:
        db.close()
    assert "SEARCH" in plan and "runs_by_status" in plan and "TEMP B-TREE" not in plan, plan


def test_the_keyset_condition_is_answered_from_the_index_on_postgres(pg_url: str) -> None:
    import psycopg2

    from zuke._serve.pg import PgServeDb
    from zuke.state import _pg_runs
    from zuke.state._protocol import RunQuery

    PgServeDb(pg_url, connections=1, wait_s=10.0).close()  # the schema
    sql, args = _pg_runs.listing_sql(
        "", RunQuery(status="suspended", limit=51), before=(1, "run-1")
    )
    conn = psycopg2.connect(pg_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SET enable_seqscan = off")
            cur.execute(b"EXPLAIN " + sql, args)
            plan = "\n".join(r[0] for r in cur.fetchall())
    finally:
        conn.close()
    assert "zuke_runs_by_status" in plan and "Sort" not in plan, plan
    assert "Index Cond" in plan and "created_ms" in plan.split("Index Cond", 1)[1], plan


def test_a_page_spends_a_bounded_time_on_records_and_says_which_it_did_not_read(
    db: ServeDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(db)
    monkeypatch.setattr(queries, "READ_BUDGET_S", 0.0)  # spent before the first record
    page = runs_page(db, "", RunsFilter(status="suspended"), now_ms=NOW)
    assert page.rows and all(r.unread and r.at == () for r in page.rows)
    monkeypatch.setattr(queries, "READ_BUDGET_S", 3600.0)
    page = runs_page(db, "", RunsFilter(status="suspended"), now_ms=NOW)
    assert all(not r.unread and r.at for r in page.rows)
