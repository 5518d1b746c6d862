"""The listing index's rows: what one holds, and the statements that read and write them.

Split from :mod:`zuke.state._fs_index` (the database: connection, schema,
recovery), which mixes :class:`RowStatements` into its
:class:`~zuke.state._fs_index.RunIndex`. A row is the run's summary as of the
last index write, the journal ``gen`` it was taken from, its ``dirty`` flag,
and — in the ``files`` table beside it — the journal as that write saw it
(:class:`~zuke.state._journal.Seen`), which is what lets a listing trust a
row after one ``stat`` (:mod:`zuke.state._fs_fresh`).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from zuke.state._journal import Seen
from zuke.state._pg_schema import from_db, to_db
from zuke.state._protocol import RunQuery
from zuke.state._query import created_ms, since_ms
from zuke.state.records import RunRecord, RunStatus, RunSummary

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

UNREADABLE = "unreadable"  #: the ``gen`` :meth:`RunIndex.apply` takes for an unreadable journal
_COLUMNS = (
    "r.id, r.build, r.root_target, r.status, r.actor, r.created_at, r.updated_at, r.gen, r.dirty, "
    "f.gen, f.length, f.mtime_ns"
)
_FROM_RUNS = "FROM runs r LEFT JOIN files f ON f.id = r.id"
_OPEN = ("running", "suspended", "cancelling")  # the statuses a live process may still change


@dataclass(frozen=True)
class Row:
    """One indexed run: its summary as of the last index write, that journal ``gen``, and
    the journal as seen then (``None``: not known, e.g. written by a zuke without it)."""

    summary: RunSummary
    gen: str
    dirty: bool
    seen: Seen | None


def _row(values: Any) -> Row:
    """A :class:`Row` from a ``SELECT`` of ``_COLUMNS``."""
    gen, seen_gen, length, mtime_ns = values[7], values[9], values[10], values[11]
    known = seen_gen == gen and length is not None
    summary = RunSummary(
        id=values[0], build=from_db(values[1]), root_target=from_db(values[2]),
        status=values[3], actor=from_db(values[4]), created_at=from_db(values[5]),
        updated_at=from_db(values[6]),
    )  # fmt: skip
    return Row(summary, gen, values[8] == 1, Seen(length, mtime_ns) if known else None)


class RowStatements:
    """The row statements of :class:`~zuke.state._fs_index.RunIndex`, which gives the connection."""

    def _using(self) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    def _transaction(self, *, durable: bool = False) -> AbstractContextManager[sqlite3.Connection]:
        raise NotImplementedError

    # ------------------------------------------------------------ writes

    def put(self, record: RunRecord, gen: str, seen: Seen | None) -> None:
        """Store ``record``'s row (and its targets) as of journal ``gen``; clears ``dirty``."""
        with self._transaction() as conn:
            self._put(conn, record, gen, seen)

    def apply(self, rows: list[tuple[str, RunRecord | None, str, Seen | None]]) -> None:
        """Several :meth:`put` ``(id, record, gen, seen)``, :meth:`remove` ``(id, None, "", …)``
        and :meth:`unreadable` ``(id, None, UNREADABLE, …)``."""
        with self._transaction() as conn:
            for run_id, record, gen, seen in rows:
                if record is not None:
                    self._put(conn, record, gen, seen)
                elif gen == UNREADABLE:
                    self._unreadable(conn, run_id, seen, settle=True)
                else:
                    self._remove(conn, run_id)

    @staticmethod
    def _saw(conn: sqlite3.Connection, run_id: str, gen: str, seen: Seen | None) -> None:
        if seen is None:
            conn.execute("DELETE FROM files WHERE id = ?", (run_id,))
        else:
            conn.execute(
                "INSERT OR REPLACE INTO files VALUES (?, ?, ?, ?)",
                (run_id, gen, seen.length, seen.mtime_ns),
            )

    @classmethod
    def _put(cls, conn: sqlite3.Connection, record: RunRecord, gen: str, seen: Seen | None) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id,
                gen,
                to_db(record.build),
                to_db(record.root_target),
                record.status,
                to_db(record.actor),
                to_db(record.created_at),
                created_ms(record.created_at),
                to_db(record.updated_at),
            ),
        )
        conn.execute("DELETE FROM targets WHERE run_id = ?", (record.id,))
        conn.executemany(
            "INSERT OR IGNORE INTO targets VALUES (?, ?)",
            ((to_db(node.name), record.id) for node in record.graph),
        )
        cls._saw(conn, record.id, gen, seen)

    def update(
        self,
        run_id: str,
        *,
        gen: str,
        seen: Seen | None,
        updated_at: str,
        status: RunStatus | None = None,
        actor: str | None = None,
        settle: bool,
    ) -> None:
        """Record a status / actor change or a compaction's new ``gen``.

        ``settle`` clears ``dirty``: only for the write that marked the row, since
        a row left dirty by a writer that died must still be re-read.
        """
        with self._transaction() as conn:
            changed = conn.execute(
                "UPDATE runs SET dirty = CASE WHEN ? THEN 0 ELSE dirty END, gen = ?, "
                "updated_at = ?, status = coalesce(?, status), actor = coalesce(?, actor) "
                "WHERE id = ? AND status IS NOT NULL",
                (
                    settle,
                    gen,
                    to_db(updated_at),
                    status,
                    None if actor is None else to_db(actor),
                    run_id,
                ),
            )
            if changed.rowcount:
                self._saw(conn, run_id, gen, seen)

    def confirm(self, checked: list[tuple[Row, Seen, str | None]]) -> None:
        """Remember journals a listing found changed in no listed field since their row.

        ``(row, seen, updated_at)``: the row as listed, the journal as the
        listing read it, and its last ``updatedAt``. A row written meanwhile
        (its ``gen``, ``dirty`` flag or ``files`` entry moved on) is left alone.
        """
        with self._transaction() as conn:
            for row, seen, updated_at in checked:
                run_id, old = row.summary.id, row.seen
                guard = "EXISTS (SELECT 1 FROM runs WHERE id = ? AND gen = ? AND dirty = 0) AND "
                args: list[object] = [run_id, row.gen, seen.length, seen.mtime_ns]
                args += [run_id, row.gen, run_id, row.gen]
                if old is None:
                    guard += "NOT EXISTS (SELECT 1 FROM files WHERE id = ? AND gen = ?)"
                else:
                    guard += "EXISTS (SELECT 1 FROM files WHERE id = ? AND gen = ? "
                    guard += "AND length = ? AND mtime_ns = ?)"
                    args += [old.length, old.mtime_ns]
                changed = conn.execute(
                    f"INSERT OR REPLACE INTO files SELECT ?, ?, ?, ? WHERE {guard}", args
                )
                if changed.rowcount and updated_at is not None:
                    conn.execute(
                        "UPDATE runs SET updated_at = ? WHERE id = ? AND gen = ?",
                        (updated_at, run_id, row.gen),
                    )

    def remove(self, run_id: str) -> None:
        with self._transaction() as conn:
            self._remove(conn, run_id)

    def unreadable(self, run_id: str, seen: Seen | None, *, settle: bool) -> None:
        """Note a journal that does not parse, so listings do not read (and warn of) it again.

        An indexed run keeps its row — listed as last indexed; reading it
        reports the damage — and the file is noted as ``seen``; a journal never
        indexed gets a row no listing returns. ``settle`` (holding the run's
        mutex) clears a dead writer's ``dirty`` flag too. A rebuild reads it again.
        """
        with self._transaction() as conn:
            self._unreadable(conn, run_id, seen, settle=settle)

    @staticmethod
    def _unreadable(
        conn: sqlite3.Connection, run_id: str, seen: Seen | None, *, settle: bool
    ) -> None:
        conn.execute("INSERT OR IGNORE INTO runs (id, dirty) VALUES (?, 0)", (run_id,))
        if settle:
            conn.execute("UPDATE runs SET dirty = 0 WHERE id = ?", (run_id,))
        if seen is not None:
            conn.execute(
                "INSERT OR REPLACE INTO files SELECT id, gen, ?, ? FROM runs "
                "WHERE id = ? AND gen IS NOT NULL",
                (seen.length, seen.mtime_ns, run_id),
            )

    @staticmethod
    def _remove(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        conn.execute("DELETE FROM targets WHERE run_id = ?", (run_id,))
        conn.execute("DELETE FROM files WHERE id = ?", (run_id,))

    # ------------------------------------------------------------ reads

    def dirty(self) -> list[str]:
        with self._using() as conn:
            return [r[0] for r in conn.execute("SELECT id FROM runs WHERE dirty = 1")]

    def ids(self) -> set[str]:
        with self._using() as conn:
            return {r[0] for r in conn.execute("SELECT id FROM runs")}

    def _common(self, target: str, batch: int) -> bool:
        """Whether more than ten pages of runs have ``target`` (counting no further)."""
        with self._using() as conn:
            (found,) = conn.execute(
                "SELECT count(*) FROM (SELECT 1 FROM targets WHERE target = ? LIMIT ?)",
                (to_db(target), 10 * batch + 1),
            ).fetchone()
        return bool(found > 10 * batch)

    def _matching(
        self, query: RunQuery, batch: int, statuses: tuple[str, ...] | None
    ) -> tuple[str, list[object]]:
        """A SELECT of the rows matching ``query``'s filters but its status, in ``statuses``.

        ``statuses`` ``None``: any listed run. The status is always one condition,
        so SQLite can seek the build + status index with it.
        """
        args: list[object] = [] if statuses is None else list(statuses)
        where = "r.status IS NOT NULL"
        if statuses is not None:
            where = f"r.status IN ({', '.join('?' * len(statuses))})"
        if query.target is not None and not self._common(query.target, batch):
            # A rare target: start from its few runs and sort them.
            sql = f"SELECT {_COLUMNS} FROM targets t JOIN runs r ON r.id = t.run_id "
            sql += f"LEFT JOIN files f ON f.id = r.id WHERE t.target = ? AND {where}"
            args.insert(0, to_db(query.target))
        else:
            # Otherwise walk the runs newest first; a common target matches soon.
            sql = f"SELECT {_COLUMNS} {_FROM_RUNS} WHERE {where}"
            if query.target is not None:
                sql += (
                    " AND EXISTS (SELECT 1 FROM targets t WHERE t.target = ? AND t.run_id = r.id)"
                )
                args.append(to_db(query.target))
        if query.build is not None:
            sql += " AND r.build = ?"
            args.append(to_db(query.build))
        since = since_ms(query)
        if since is not None:
            sql += " AND r.created_ms >= ?"
            args.append(since)
        return sql, args

    def rows(self, query: RunQuery, batch: int) -> Iterator[Row]:
        """Rows matching ``query``'s filters, newest first, fetched ``batch`` at a time."""
        statuses = None if query.status is None else (query.status,)
        sql, args = self._matching(query, batch, statuses)
        after: tuple[str, str] | None = None
        while True:
            page = sql + (" AND (r.created_at, r.id) < (?, ?)" if after else "")
            page += " ORDER BY r.created_at DESC, r.id DESC LIMIT ?"
            with self._using() as conn:
                found = conn.execute(page, (*args, *(after or ()), batch)).fetchall()
            yield from map(_row, found)
            if len(found) < batch:
                return
            after = (found[-1][5], found[-1][0])

    def others(self, query: RunQuery) -> list[Row]:
        """Rows ``query`` leaves out only for their status, where that status may have moved on.

        A run listed as ``running``, ``suspended`` or ``cancelling`` can change
        status in a journal write the index was not told of (a zuke without the
        index, a file copied over it): a status listing checks those rows' files.
        """
        others = tuple(status for status in _OPEN if status != query.status)
        sql, args = self._matching(query, 500, others)
        with self._using() as conn:
            return [_row(v) for v in conn.execute(sql, args)]
