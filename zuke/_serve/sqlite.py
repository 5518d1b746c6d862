"""One SQLite file shared by the service's worker threads: pooled connections, transactions.

Each mutation runs in one ``BEGIN IMMEDIATE`` transaction, behind an
in-process lock too, so threads queue instead of spinning on ``SQLITE_BUSY``:
the read of the current version and the write that depends on it cannot
interleave with another writer, which is what makes compare-and-swap and lock
acquisition atomic — across the server's threads and even across two servers
on one file. Reads take a snapshot (``BEGIN`` … ``COMMIT``) so the rows they
combine agree.

A write can also be taken **promptly** (:meth:`Pool.promptly`), which is how
the event loop runs a journal append itself instead of handing it to a worker
thread (the hop cost ~0.1 ms a request, a fifth of an append). A prompt write
never waits: if it would — the write lock is held by a worker, another
process holds SQLite's lock, the commit needs an fsync, or long work lies
ahead (:meth:`Pool.long_work_ahead`) — it raises :class:`WouldWait` before
anything is written, and the caller hands the request to a worker instead.
Its connection never checkpoints the write-ahead log (that may fsync);
every :data:`PROMPT_WRITES_PER_WORKER`-th prompt write goes to a worker,
whose commit checkpoints as usual.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zuke._errors import StateError, ZukeError


class DbClosedError(StateError):
    """The database was closed (the server is shutting down)."""


class WouldWait(ZukeError):
    """Internal: a prompt write would have had to wait; nothing was written."""


#: Prompt writes in a row before one is sent to a worker (whose commit checkpoints the WAL).
PROMPT_WRITES_PER_WORKER = 200


class Pool:
    """Thread-safe access to one SQLite file: a connection per concurrent user."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._write_lock = threading.Lock()
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False
        self._prompt = threading.local()
        self._prompt_conn: sqlite3.Connection | None = None
        self._prompt_writes = 0

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._all_lock:
            self._closed = True
            for conn in self._all:
                conn.close()
            self._all.clear()

    def _open(self, *, timeout_s: float) -> sqlite3.Connection:
        if self._closed:
            raise DbClosedError("serve: the database is closed")
        try:
            conn = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False, timeout=timeout_s
            )
        except sqlite3.Error as exc:
            raise StateError(f"serve: cannot open {self.path}: {exc}") from None
        with self._all_lock:
            if self.closed:  # close() ran while this connection was opening
                conn.close()
                raise DbClosedError("serve: the database is closed") from None
            self._all.append(conn)
        return conn

    @contextmanager
    def conn(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection in autocommit mode (connections outlive worker threads)."""
        if self._closed:
            raise DbClosedError("serve: the database is closed")
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            conn = self._open(timeout_s=30.0)
        try:
            yield conn
        finally:
            self._idle.put(conn)

    @contextmanager
    def promptly(self) -> Iterator[None]:
        """Within it, this thread's writes raise :class:`WouldWait` rather than wait."""
        self._prompt.on = True
        try:
            yield
        finally:
            self._prompt.on = False

    def long_work_ahead(self) -> None:
        """Say, inside a write, that long work follows: a prompt write gives way here."""
        if getattr(self._prompt, "on", False):
            raise WouldWait

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """One read snapshot."""
        with self.conn() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    @contextmanager
    def write(self, *, checkpoint: bool = True) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction: committed on success, rolled back on error.

        A ``checkpoint`` commit is fsynced before it returns. Any other (a
        journal append that changes no status) survives the server process
        dying but not a power cut — until the next checkpoint fsyncs it too:
        the same trade the filesystem store makes, for ~0.1 ms a write.
        """
        if getattr(self._prompt, "on", False):
            with self._write_promptly(checkpoint=checkpoint) as conn:
                yield conn
            return
        with self._write_lock, self.conn() as conn:
            conn.execute(f"PRAGMA synchronous={'FULL' if checkpoint else 'NORMAL'}")
            conn.execute("BEGIN IMMEDIATE")
            with _committed(conn):
                yield conn
            self._prompt_writes = 0  # this commit checkpointed the WAL if it had grown

    @contextmanager
    def _write_promptly(self, *, checkpoint: bool) -> Iterator[sqlite3.Connection]:
        if checkpoint or self._prompt_writes >= PROMPT_WRITES_PER_WORKER:
            raise WouldWait
        if not self._write_lock.acquire(blocking=False):
            raise WouldWait
        try:
            conn = self._prompt_conn
            if conn is None:
                # busy timeout 0: another process's lock is a WouldWait, not a wait.
                conn = self._prompt_conn = self._open(timeout_s=0.0)
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.execute("PRAGMA wal_autocheckpoint=0")
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                raise WouldWait from None
            with _committed(conn):
                yield conn
            self._prompt_writes += 1
        finally:
            self._write_lock.release()


@contextmanager
def _committed(conn: sqlite3.Connection) -> Iterator[None]:
    """The transaction begun on ``conn``: committed if the block ends, rolled back if it
    raises (whatever it raises: a cancelled request's too)."""
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


__all__ = ["PROMPT_WRITES_PER_WORKER", "DbClosedError", "Pool", "WouldWait"]
