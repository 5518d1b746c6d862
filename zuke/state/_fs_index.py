"""The filesystem store's listing index: a SQLite cache of run summaries, derived from the journals.

Why: listing used to parse every journal (2.1 s for 20,000 runs, however few
were asked for). The index answers ``list_runs`` with indexed queries on
status, build, target and ``createdAt``, so a listing costs in proportion to
what it returns. It is a cache: the journals stay the truth, and the index can
always be rebuilt from them.

Layout, under ``<dir>/index/`` (no run id or lock key can name it):

- ``runs.sqlite3`` (+ SQLite's ``-wal`` and ``-shm``), in WAL mode:
  ``meta(k, v)`` holds ``format`` (1), ``complete`` (once the index covers
  every journal) and ``directory`` (the store directory's stamp when a listing
  last found every journal in it indexed); ``runs`` holds one row per run — the
  summary fields, the journal ``gen`` it was taken from, ``createdAt`` in epoch
  ms for ``since``, and a ``dirty`` flag; ``targets(target, run_id)`` holds the
  graph's node names; ``files`` holds, per run, the journal as the row last saw
  it (:class:`~zuke.state._journal.Seen`). ``files`` came after format 1
  shipped, in a table of its own, so a zuke without it still reads and writes
  the index (its writes leave ``files`` behind, which a listing notices). The
  row statements are :mod:`zuke.state._fs_rows`.
- ``rebuild.lock`` — the flock a rebuild (or a quarantine) holds.
- ``clock`` — an empty file a listing stamps to read the filesystem's time
  (:func:`zuke.state._fs_listing.find_new`).

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
from typing import Final

from zuke._errors import StoreUnavailableError
from zuke.state import _journal
from zuke.state._files import ensure_directory, mutex, os_failure, try_mutex
from zuke.state._fs_rows import RowStatements

_LOG: Final = logging.getLogger("zuke.state")
FORMAT = "1"
DIRECTORY = "index"
DATABASE = "runs.sqlite3"
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26

_FILES = """CREATE TABLE IF NOT EXISTS files (
    id TEXT PRIMARY KEY, gen TEXT NOT NULL, length INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL) WITHOUT ROWID"""
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
    _FILES,
)


class IndexUnavailable(Exception):
    """The index cannot answer (unwritable, locked too long, corrupt): list by scanning."""

    def __init__(self, message: str, *, corrupt: bool = False, inode: int | None = None) -> None:
        super().__init__(message)
        self.corrupt = corrupt
        self.inode = inode  #: the database file found corrupt, for :meth:`RunIndex.recover`


class RunIndex(RowStatements):
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
            elif (
                conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'files'").fetchone() is None
            ):
                conn.execute(_FILES)  # a format 1 index made before the table existed
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

    def set_complete(self) -> None:
        with self._transaction(durable=True) as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('complete', '1')")

    def clear_complete(self) -> None:
        with self._transaction(durable=True) as conn:
            conn.execute("DELETE FROM meta WHERE k IN ('complete', 'directory')")

    def set_stamp(self, stamp: str) -> None:
        """Record the directory's stamp: every journal it held was indexed."""
        with self._transaction() as conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('directory', ?)", (stamp,))

    # ------------------------------------------------------------ reads

    def complete(self) -> bool:
        return self.state()[0]

    def state(self) -> tuple[bool, str | None]:
        """Whether the index is complete, and the directory stamp last recorded (one query)."""
        with self._using() as conn:
            found = dict(conn.execute("SELECT k, v FROM meta WHERE k IN ('complete', 'directory')"))
        return "complete" in found, found.get("directory")

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
