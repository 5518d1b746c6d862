"""Helpers shared by the Postgres store tests: the schema versions, and stores opened at once."""

from __future__ import annotations

import threading

from zuke.state._pg_listen import APPLICATION_NAME
from zuke.state.postgres import PostgresStateStore


def schema_versions(store: PostgresStateStore) -> list[int]:
    """The versions recorded in ``zuke_schema_version``, in order."""
    with store.database.connection() as conn:
        rows = conn.execute("SELECT version FROM zuke_schema_version ORDER BY version").fetchall()
    return [int(v) for (v,) in rows]


def listeners(store: PostgresStateStore) -> int:
    """How many zuke listeners (``application_name`` ``zuke-listen``) sit in ``LISTEN``."""
    with store.database.connection() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            " AND query LIKE 'LISTEN%%' AND datname = current_database()",  # a shared cluster
            (APPLICATION_NAME,),
        ).fetchone()
    return 0 if row is None else int(row[0])


def open_at_once(stores: list[PostgresStateStore], timeout: float) -> list[BaseException]:
    """Each store's first read, all released together by a barrier; what any of them raised."""
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def open_one(s: PostgresStateStore) -> None:
        try:
            barrier.wait(timeout=timeout)
            s.list_runs()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return errors
