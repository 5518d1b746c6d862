"""``FileSystemStateStore``: run records and locks in a local directory.

Owns the mapping from the :class:`~zuke.state.StateStore` protocol onto files:

- ``<dir>/<run id>.jsonl`` — one journal per run (format and versioning in
  :mod:`zuke.state._journal`): a base record plus one appended line per
  :class:`~zuke.state.records.RunDelta`, so a run's persistence cost is linear
  in its transitions.
- ``<dir>/<run id>.lock`` — the run's cross-process mutex (filelock). Every
  write (create, put, append, delete) happens under it; reads do not need it,
  because a full write is an atomic rename and an in-flight append is just a
  torn last line that readers ignore.
- ``<dir>/locks/`` — cross-run locks (:mod:`zuke.state._fs_locks`).

The directory is created on first write. Ids and keys pass
:func:`~zuke.state._ids.check_id` before any path is built.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Final

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import CorruptRecordError, StoreUnavailableError, UnsafeIdError
from zuke.state import _journal
from zuke.state._files import (
    append_line,
    atomic_write,
    ensure_directory,
    mutex,
    os_failure,
)
from zuke.state._fs_locks import FsLocks
from zuke.state._ids import check_id
from zuke.state._protocol import (
    RUN_LEASE_PREFIX,
    Conflict,
    LockAcquired,
    LockHeld,
    LockHolder,
    RunQuery,
    StoredRun,
    Written,
)
from zuke.state._query import select
from zuke.state.records import RunDelta, RunRecord, RunSummary

_LOG: Final = logging.getLogger("zuke.state")
_EVERY_RUN: Final = RunQuery()


class FileSystemStateStore:
    """A :class:`~zuke.state.JournalingStateStore` backed by a directory.

    ``mutex_timeout_s`` bounds the wait for another process's write on the same
    run or lock key; past it the call raises :class:`~zuke.StoreUnavailableError`.
    ``bytes_written`` counts every byte this instance has written to run and
    lock files (for benchmarks and the linear-cost tests).

    Whole-record writes are always fsynced. A journal append is fsynced when it
    changes the run's status (a checkpoint: suspended, finished, cancelled), or
    always with ``sync_appends``; otherwise it is durable against the process
    dying, not against the machine losing power (see ``docs/state.md``).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] = ".zuke/runs",
        *,
        clock: Clock = SYSTEM_CLOCK,
        mutex_timeout_s: float = 5.0,
        sync_appends: bool = False,
    ) -> None:
        self.directory: Final[str] = os.fspath(directory)
        self.clock: Final[Clock] = clock
        self.mutex_timeout_s: Final[float] = mutex_timeout_s
        self.sync_appends: Final[bool] = sync_appends
        self.bytes_written = 0
        self._count_lock = threading.Lock()
        self._locks = FsLocks(self.directory, clock, mutex_timeout_s, self._count)

    def __repr__(self) -> str:
        return f"FileSystemStateStore({self.directory!r})"

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.bytes_written += n

    # ------------------------------------------------------------ paths

    def _path(self, run_id: str) -> str:
        return os.path.join(self.directory, check_id(run_id) + _journal.SUFFIX)

    def _where(self, run_id: str) -> str:
        return f"run {run_id!r} ({self._path(run_id)})"

    def _mutex_path(self, run_id: str) -> str:
        return os.path.join(self.directory, check_id(run_id) + ".lock")

    def _run_mutex(self, run_id: str) -> AbstractContextManager[None]:
        ensure_directory(self.directory, directory=self.directory)
        return mutex(self._mutex_path(run_id), self.mutex_timeout_s, directory=self.directory)

    def _probe(self, run_id: str) -> _journal.Probe | None:
        path = self._path(run_id)
        try:
            return _journal.probe(path, self._where(run_id))
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self.directory) from None

    # ------------------------------------------------------------ runs

    def get_run(self, run_id: str) -> StoredRun | None:
        path = self._path(run_id)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self.directory) from None
        record, version = _journal.read(data, self._where(run_id))
        if record.id != run_id:
            raise CorruptRecordError(
                f"state: {self._where(run_id)} holds a record with id {record.id!r}"
            )
        return StoredRun(record=record, version=version)

    def create_run(self, record: RunRecord) -> Written | Conflict:
        path = self._path(record.id)
        with self._run_mutex(record.id):
            if os.path.lexists(path):
                return Conflict()
            return self._write_whole(path, record)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        path = self._path(record.id)
        with self._run_mutex(record.id):
            current = self._probe(record.id)
            if current is None or current.version != expected_version:
                return Conflict()
            return self._write_whole(path, record)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        path = self._path(run_id)
        line = _journal.delta_line(delta)
        with self._run_mutex(run_id):
            current = self._probe(run_id)
            if current is None or current.version != expected_version:
                return Conflict()
            # A torn tail can only be a dead appender's: live ones hold this mutex.
            truncate_to = current.valid if current.torn else None
            sync = self.sync_appends or delta.status is not None  # status changes: checkpoints
            self._count(
                append_line(
                    path, line, truncate_to=truncate_to, directory=self.directory, sync=sync
                )
            )
            length = current.valid + len(line)
            journal = current.journal_bytes + len(line)
            if journal > max(current.header.base, _journal.COMPACT_MIN_BYTES):
                # Rewriting costs about base + journal bytes and happens only after
                # more than `base` bytes of deltas, so total bytes stay linear.
                return self._compact(run_id, path)
            return Written(version=_journal.version_of(current.header.gen, length))

    def _write_whole(self, path: str, record: RunRecord) -> Written:
        data, version = _journal.compacted(record)
        self._count(atomic_write(path, data, directory=self.directory))
        return Written(version=version)

    def _compact(self, run_id: str, path: str) -> Written:
        stored = self.get_run(run_id)
        if stored is None:  # cannot happen under the mutex; be loud if it does
            raise StoreUnavailableError(f"state: {self._where(run_id)} vanished while compacting")
        return self._write_whole(path, stored.record)

    def delete_run(self, run_id: str) -> None:
        path = self._path(run_id)
        if not os.path.isdir(self.directory):
            return
        with self._run_mutex(run_id):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise os_failure("remove", path, exc, directory=self.directory) from None
            # The run is gone, so its mutex file can go too: a process still waiting
            # on it finds no run once it gets it. Deleting it while held keeps a new
            # opener from locking a second file while we hold the first.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._mutex_path(run_id))
        # The run's own lease key is never taken again: its files go too.
        self._locks.forget(RUN_LEASE_PREFIX + run_id)

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise os_failure("list", self.directory, exc, directory=self.directory) from None
        return select(self._scan(names), query)

    def _scan(self, names: list[str]) -> Iterator[RunRecord]:
        for name in names:
            if not name.endswith(_journal.SUFFIX):
                continue
            try:
                stored = self.get_run(name[: -len(_journal.SUFFIX)])
            except UnsafeIdError:  # a stray file whose name is no run id
                _LOG.warning("state: skipping %s in %s: not a run file", name, self.directory)
                continue
            except (CorruptRecordError, StoreUnavailableError) as exc:
                # One bad file must not hide every other run: report it and go on.
                _LOG.warning("state: skipping unreadable run file %s: %s", name, exc)
                continue
            if stored is not None:  # None: deleted since the directory was listed
                yield stored.record

    # ------------------------------------------------------------ locks

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        return self._locks.acquire(key, holder, ttl_ms)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        return self._locks.renew(key, token, ttl_ms)

    def release_lock(self, key: str, token: str) -> None:
        self._locks.release(key, token)
