"""Helpers shared by the Postgres store tests: the schema versions, and stores opened at once."""

from __future__ import annotations

import threading

from zuke.state.postgres import PostgresStateStore


def schema_versions(store: PostgresStateStore) -> list[int]:
    """The versions recorded in ``zuke_schema_version``, in order."""
    with store.database.connection() as conn:
        rows = conn.execute("SELECT version FROM zuke_schema_version ORDER BY version").fetchall()
    return [int(v) for (v,) in rows]


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
