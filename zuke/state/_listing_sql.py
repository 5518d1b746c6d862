"""The runs listing as SQL: one ``SELECT`` and one keyset paging rule for every SQL store.

The Postgres store (:mod:`._pg_runs`) and ``zuke serve``'s databases (SQLite,
:mod:`zuke._serve.db`; Postgres through the store's SQL) list runs the same way: newest
first by ``createdAt`` as a time (``created_ms``), then id, both descending, every filter
served by an index, undated runs last. Written once here so the filters, the order and the
paging cannot drift apart between them; each caller names its tables, its placeholder and
how it stores text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

Row = TypeVar("Row")

#: a place in the listing's order: ``(created_ms, id)``; ``created_ms`` ``None`` for a run
#: whose ``createdAt`` is no time (listed last), ``id`` ``None`` for "before every such run"
Position = tuple[int | None, str | None]


def listing_sql(
    *,
    runs: str,
    targets: str,
    mark: str,
    ns: str,
    status: str | None,
    build: str | None,
    since_ms: int | None,
    target: str | None,
    before: Position | None,
    limit: int | None,
    nulls_last: bool = False,
) -> tuple[str, list[str | int]]:
    """The statement and its arguments: ``runs`` and ``targets`` are the tables, ``mark`` the
    driver's placeholder (``%s``, ``?``), the filters' values as the table stores them.

    ``before=(ms, id)`` keeps the dated rows past it; ``(None, id)`` the undated rows past
    it (``(None, None)``: all undated rows). ``nulls_last`` spells out where undated rows go
    (Postgres puts them first in a descending order unless told; SQLite last).
    """
    sql = [
        "SELECT id, build, root_target, status, actor, created_at, updated_at",
        f"FROM {runs} r WHERE r.ns = {mark}",
    ]
    args: list[str | int] = [ns]
    for column, value in (("status", status), ("build", build)):
        if value is not None:
            sql.append(f"AND r.{column} = {mark}")
            args.append(value)
    if since_ms is not None:
        sql.append(f"AND r.created_ms >= {mark}")
        args.append(since_ms)
    if target is not None:
        sql.append(
            f"AND EXISTS (SELECT 1 FROM {targets} t"
            f" WHERE t.ns = r.ns AND t.run_id = r.id AND t.name = {mark})"
        )
        args.append(target)
    if before is not None:
        at, after_id = before
        if at is not None:
            sql.append(f"AND (r.created_ms, r.id) < ({mark}, {mark})")
            args += [at, after_id or ""]
        else:
            sql.append("AND r.created_ms IS NULL")
            if after_id is not None:
                sql.append(f"AND r.id < {mark}")
                args.append(after_id)
    sql.append(f"ORDER BY r.created_ms DESC{' NULLS LAST' if nulls_last else ''}, r.id DESC")
    if limit is not None:
        sql.append(f"LIMIT {mark}")
        args.append(limit)
    return " ".join(sql), args


def page(
    fetch: Callable[[int | None, Position | None], list[Row]],
    *,
    limit: int | None,
    before: Position | None,
) -> list[Row]:
    """The rows past ``before`` (keyset paging), ``fetch(limit, before)`` doing each query.

    Past a dated row come the older dated rows, then the undated ones (last in the order):
    two queries, the second only while the page is not full.
    """
    rows = fetch(limit, before)
    if before is not None and before[0] is not None and (limit is None or len(rows) < limit):
        rows += fetch(None if limit is None else limit - len(rows), (None, None))
    return rows


__all__ = ["Position", "listing_sql", "page"]
