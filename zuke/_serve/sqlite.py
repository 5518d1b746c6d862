"""One SQLite file shared by the service's worker threads: pooled connections, transactions.

Each mutation runs in one ``BEGIN IMMEDIATE`` transaction, behind an
in-process lock too, so threads queue instead of spinning on ``SQLITE_BUSY``:
the read of the current version and the write that depends on it cannot
interleave with another writer, which is what makes compare-and-swap and lock
acquisition atomic — across the server's threads and even across two servers
on one file. Reads take a snapshot (``BEGIN`` … ``COMMIT``) so the rows they
combine agree.
"""

from __future__ import annotations

import os
import queue
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from zuke._errors import StateError


class DbClosedError(StateError):
    """The database was closed (the server is shutting down)."""


class Pool:
    """Thread-safe access to one SQLite file: a connection per concurrent user."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._write_lock = threading.Lock()
        self._idle: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        with self._all_lock:
            self._closed = True
            for conn in self._all:
                conn.close()
            self._all.clear()

    @contextmanager
    def conn(self) -> Iterator[sqlite3.Connection]:
        """A pooled connection in autocommit mode (connections outlive worker threads)."""
        if self._closed:
            raise DbClosedError("serve: the database is closed")
        try:
            conn = self._idle.get_nowait()
        except queue.Empty:
            try:
                conn = sqlite3.connect(
                    self.path, isolation_level=None, check_same_thread=False, timeout=30.0
                )
            except sqlite3.Error as exc:
                raise StateError(f"serve: cannot open {self.path}: {exc}") from None
            with self._all_lock:
                if self.closed:  # close() ran while this connection was opening
                    conn.close()
                    raise DbClosedError("serve: the database is closed") from None
                self._all.append(conn)
        try:
            yield conn
        finally:
            self._idle.put(conn)

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
        with self._write_lock, self.conn() as conn:
            conn.execute(f"PRAGMA synchronous={'FULL' if checkpoint else 'NORMAL'}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")


__all__ = ["DbClosedError", "Pool"]
