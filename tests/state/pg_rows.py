"""How many rows a run has in one of the Postgres store's tables, read past the store's API."""

from __future__ import annotations

from typing import Literal

from zuke.state.postgres import PostgresStateStore

Table = Literal["zuke_run_deltas", "zuke_run_targets"]


def run_rows(store: PostgresStateStore, table: Table, run_id: str) -> int:
    """The rows of ``table`` for ``run_id`` (a fixed table name: never from input)."""
    with store.database.connection() as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE run_id = %s", (run_id,)).fetchone()
    assert row is not None
    return int(row[0])
