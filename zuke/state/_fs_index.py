"""The filesystem store's listing index: a SQLite cache of run summaries, derived from the journals.

Why: listing used to parse every journal (2.1 s for 20,000 runs, however few
were asked for). The index answers ``list_runs`` with indexed queries on
status, build, target and ``createdAt``, so a listing costs in proportion to
what it returns. It is a cache: the journals stay the truth, and the index can
always be rebuilt from them.

Layout, under ``<dir>/index/`` (no run id or lock key can name it):

- ``runs.sqlite3`` (+ SQLite's ``-wal`` and ``-shm``), in WAL mode:
  ``meta(k, v)`` holds ``format`` (1) and ``complete`` (once the index covers
  every journal); ``runs`` holds one row per run — the summary fields, the
  journal ``gen`` it was taken from, ``createdAt`` in epoch ms for ``since``,
  and a ``dirty`` flag; ``targets(target, run_id)`` holds the graph's node names.
- ``rebuild.lock`` — the flock a rebuild (or a quarantine) holds.

The writer's rule (:mod:`zuke.state.filesystem`, under the run's mutex): before
a write that changes a listed field (create, put, delete, a status or actor
change) it marks the row dirty, durably (``synchronous=FULL``); after the
journal write it stores the new row and clears the flag (not fsynced: losing it
only leaves the row dirty). A dirty row is re-read from its journal by the next
listing that finds the run's mutex free, so a crash between the journal write
and the index update costs one re-read, never a wrong listing. ``updatedAt``
changes with every append; the index does not follow it, a listing reads it
from the journal's last line (see :mod:`zuke.state._fs_listing`).

Concurrency: SQLite serialises writers across processes (busy timeout =
the store's mutex timeout); each store instance has one connection, used under
a thread lock. A connection notices when the database file was replaced
(quarantined or deleted) by comparing inodes before every use, and reopens.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from zuke._errors import StoreUnavailableError
from zuke.state import _journal
from zuke.state._files import ensure_directory, mutex, os_failure, try_mutex
from zuke.state._protocol import RunQuery
from zuke.state._query import created_ms, since_ms
from zuke.state.records import RunRecord, RunStatus, RunSummary

_LOG: Final = logging.getLogger("zuke.state")
FORMAT = "1"
DIRECTORY = "index"
DATABASE = "runs.sqlite3"
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL) WITHOUT ROWID",
    """CREATE TABLE IF NOT EXISTS runs (
        id TEXT PRIMARY KEY, dirty INTEGER NOT NULL DEFAULT 0, gen TEXT,
        build TEXT, root_target TEXT, status TEXT, actor TEXT,
        created_at TEXT, created_ms INTEGER, updated_at TEXT) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS runs_newest ON runs (created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_status ON runs (status, created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_build ON runs (build, created_at, id)",
    # "this build's suspended runs": the resume sweep's question
    "CREATE INDEX IF NOT EXISTS runs_build_status ON runs (build, status, created_at, id)",
    "CREATE INDEX IF NOT EXISTS runs_dirty ON runs (id) WHERE dirty = 1",
    """CREATE TABLE IF NOT EXISTS targets (
        target TEXT NOT NULL, run_id TEXT NOT NULL, PRIMARY KEY (target, run_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS targets_run ON targets (run_id)",
)
_COLUMNS = (
    "r.id, r.build, r.root_target, r.status, r.actor, r.created_at, r.updated_at, r.gen, r.dirty"
)


class IndexUnavailable(Exception):
    """The index cannot answer (unwritable, locked too long, corrupt): list by scanning."""

    def __init__(self, message: str, *, corrupt: bool = False, inode: int | None = None) -> None:
        super().__init__(message)
        self.corrupt = corrupt
        self.inode = inode  #: the database file found corrupt, for :meth:`RunIndex.recover`


@dataclass(frozen=True)
class Row:
    """One indexed run: its summary as of the last index write, and that journal ``gen``."""

    summary: RunSummary
    gen: str
    dirty: bool


class RunIndex:
    """The index of one store directory; thread-safe, one SQLite connection per instance."""

    def __init__(self, directory: str, timeout_s: float) -> None:
        self._store_dir = directory
        self.folder: Final = os.path.join(directory, DIRECTORY)
        self.path: Final = os.path.join(self.folder, DATABASE)
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._identity: tuple[int, int, int] | None = None  # (pid, st_dev, st_ino)

    # ------------------------------------------------------------ connection

    def _open(self) -> sqlite3.Connection:
        ensure_directory(self.folder, directory=self._store_dir)
        conn = sqlite3.connect(
            self.path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")  # creates the file if need be
            st = os.stat(self.path)
            self._identity = (os.getpid(), st.st_dev, st.st_ino)
            conn.execute("PRAGMA synchronous=NORMAL")
            if self._format(conn) != FORMAT:
                self._initialise(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _format(conn: sqlite3.Connection) -> str | None:
        try:
            row = conn.execute("SELECT v FROM meta WHERE k = 'format'").fetchone()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return None
            raise
        return None if row is None else str(row[0])

    def _initialise(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _SCHEMA:
                conn.execute(statement)
            found = conn.execute("SELECT v FROM meta WHERE k = 'format'").fetchone()
            if found is not None and found[0] != FORMAT:
                raise IndexUnavailable(f"index format {found[0]!r} is not {FORMAT}", corrupt=True)
            if found is None:
                conn.execute("INSERT INTO meta VALUES ('format', ?)", (FORMAT,))
                # Created before any journal exists: it covers them all from the start.
                # Any journal written later is marked here first (see the module doc).
                if not any(n.endswith(_journal.SUFFIX) for n in os.listdir(self._store_dir)):
                    conn.execute("INSERT INTO meta VALUES ('complete', '1')")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    def _current(self) -> bool:
        if self._identity is None or self._identity[0] != os.getpid():
            return False
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self._identity[1:]

    @contextlib.contextmanager
    def _using(self) -> Iterator[sqlite3.Connection]:
        """The connection, under the thread lock; SQLite errors become :class:`IndexUnavailable`."""
        with self._lock:
            try:
                if self._conn is None or not self._current():
                    self.close_locked()
                    self._conn = self._open()
                yield self._conn
            except sqlite3.Error as exc:
                code = getattr(exc, "sqlite_errorcode", None)
                corrupt = code in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
                inode = self._identity[2] if self._identity else None
                self.close_locked()
                raise IndexUnavailable(
                    f"{self.path}: {exc}", corrupt=corrupt, inode=inode
                ) from None
            except IndexUnavailable as exc:
                if exc.corrupt and exc.inode is None and self._identity:
                    exc.inode = self._identity[2]
                self.close_locked()
                raise
            except StoreUnavailableError as exc:
                raise IndexUnavailable(str(exc)) from None
            except OSError as exc:
                raise IndexUnavailable(f"{self.path}: {exc.strerror or exc}") from None

    def close_locked(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self.close_locked()

    @contextlib.contextmanager
    def _transaction(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        with self._using() as conn:
            if durable:
                conn.execute("PRAGMA synchronous=FULL")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
            finally:
                if durable:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("PRAGMA synchronous=NORMAL")

    # ------------------------------------------------------------ writes

    def mark(self, run_id: str) -> None:
        """Mark ``run_id`` dirty, durably, before its journal changes a listed field.

        A corrupt database is moved aside and a fresh one marked; any other
        failure refuses the write (:class:`StoreUnavailableError`), since a
        journal change the index could not be told about might never be listed.
        """
        failure: IndexUnavailable | None = None
        for attempt in (1, 2):
            try:
                with self._transaction(durable=True) as conn:
                    conn.execute(
                        "INSERT INTO runs (id, dirty) VALUES (?, 1) "
                        "ON CONFLICT (id) DO UPDATE SET dirty = 1",
                        (run_id,),
                    )
                return
            except IndexUnavailable as exc:
                if exc.corrupt and attempt == 1:
                    self.recover(exc.inode)
                    continue
                failure = exc
        raise StoreUnavailableError(
            f"state: cannot update the run index {self.path!r} ({failure}); check the state "
            f"directory {self._store_dir!r} (permissions, disk space) and retry — "
            f"if the index is damaged, delete {self.folder!r} and it is rebuilt"
        )

    def put(self, record: RunRecord, gen: str) -> None:
        """Store ``record``'s row (and its targets) as of journal ``gen``; clears ``dirty``."""
        with self._transaction() as conn:
            self._put(conn, record, gen)

    def apply(self, rows: list[tuple[str, RunRecord | None, str]]) -> None:
        """Several :meth:`put` ``(id, record, gen)`` and :meth:`remove` ``(id, None, "")``."""
        with self._transaction() as conn:
            for run_id, record, gen in rows:
                if record is None:
                    self._remove(conn, run_id)
                else:
                    self._put(conn, record, gen)

    @staticmethod
    def _put(conn: sqlite3.Connection, record: RunRecord, gen: str) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, 0, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                record.id,
                gen,
                record.build,
                record.root_target,
                record.status,
                record.actor,
                record.created_at,
                created_ms(record.created_at),
                record.updated_at,
            ),
        )
        conn.execute("DELETE FROM targets WHERE run_id = ?", (record.id,))
        conn.executemany(
            "INSERT OR IGNORE INTO targets VALUES (?, ?)",
            ((node.name, record.id) for node in record.graph),
        )

    def update(
        self,
        run_id: str,
        *,
        gen: str,
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
            conn.execute(
                "UPDATE runs SET dirty = CASE WHEN ? THEN 0 ELSE dirty END, gen = ?, "
                "updated_at = ?, status = coalesce(?, status), actor = coalesce(?, actor) "
                "WHERE id = ? AND status IS NOT NULL",
                (settle, gen, updated_at, status, actor, run_id),
            )

    def remove(self, run_id: str) -> None:
        with self._transaction() as conn:
            self._remove(conn, run_id)

    @staticmethod
    def _remove(conn: sqlite3.Connection, run_id: str) -> None:
        conn.execute("DELETE FROM runs WHERE id = ?", (run_id,))
        conn.execute("DELETE FROM targets WHERE run_id = ?", (run_id,))

    def set_complete(self) -> None:
        with self._transaction(durable=True) as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('complete', '1')")

    def clear_complete(self) -> None:
        with self._transaction(durable=True) as conn:
            conn.execute("DELETE FROM meta WHERE k = 'complete'")

    # ------------------------------------------------------------ reads

    def complete(self) -> bool:
        with self._using() as conn:
            return conn.execute("SELECT 1 FROM meta WHERE k = 'complete'").fetchone() is not None

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
                (target, 10 * batch + 1),
            ).fetchone()
        return bool(found > 10 * batch)

    def rows(self, query: RunQuery, batch: int) -> Iterator[Row]:
        """Rows matching ``query``'s filters, newest first, fetched ``batch`` at a time."""
        args: list[object] = []
        if query.target is not None and not self._common(query.target, batch):
            # A rare target: start from its few runs and sort them.
            sql = f"SELECT {_COLUMNS} FROM targets t JOIN runs r ON r.id = t.run_id "
            sql += "WHERE t.target = ? AND r.status IS NOT NULL"
            args.append(query.target)
        else:
            # Otherwise walk the runs newest first; a common target matches soon.
            sql = f"SELECT {_COLUMNS} FROM runs r WHERE r.status IS NOT NULL"
            if query.target is not None:
                sql += (
                    " AND EXISTS (SELECT 1 FROM targets t WHERE t.target = ? AND t.run_id = r.id)"
                )
                args.append(query.target)
        for column, value in (("status", query.status), ("build", query.build)):
            if value is not None:
                sql += f" AND r.{column} = ?"
                args.append(value)
        since = since_ms(query)
        if since is not None:
            sql += " AND r.created_ms >= ?"
            args.append(since)
        after: tuple[str, str] | None = None
        while True:
            page = sql + (" AND (r.created_at, r.id) < (?, ?)" if after else "")
            page += " ORDER BY r.created_at DESC, r.id DESC LIMIT ?"
            with self._using() as conn:
                found = conn.execute(page, (*args, *(after or ()), batch)).fetchall()
            for values in found:
                yield Row(summary=RunSummary(*values[:7]), gen=values[7], dirty=values[8] == 1)
            if len(found) < batch:
                return
            after = (found[-1][5], found[-1][0])

    # ------------------------------------------------------------ recovery

    @contextlib.contextmanager
    def rebuilding(self, *, wait: bool) -> Iterator[bool]:
        """Hold the rebuild lock (``True``); without ``wait``, ``False`` at once if it is taken."""
        ensure_directory(self.folder, directory=self._store_dir)
        path = os.path.join(self.folder, "rebuild.lock")
        if wait:
            with mutex(path, self._timeout_s, directory=self._store_dir):
                yield True
            return
        with try_mutex(path) as held:
            yield held

    def recover(self, inode: int | None) -> None:
        """Quarantine the database file ``inode`` was found corrupt in, unless already done."""
        with self.rebuilding(wait=True):
            try:
                current = os.stat(self.path).st_ino
            except FileNotFoundError:
                return
            if inode is None or current == inode:
                self.quarantine()

    def quarantine(self) -> None:
        """Move a corrupt or foreign database aside (kept for inspection); the next use starts over.

        Call it holding :meth:`rebuilding`. Other processes notice the new inode and reopen.
        """
        with self._lock:
            self.close_locked()
            aside = f".corrupt-{uuid.uuid4().hex[:8]}"
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.rename(self.path + suffix, self.path + suffix + aside)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    path = self.path + suffix
                    raise os_failure("move aside", path, exc, directory=self._store_dir) from None
            _LOG.warning(
                "state: the run index %s was unreadable; kept it as %s and rebuilding it "
                "from the journals",
                self.path,
                self.path + aside,
            )
