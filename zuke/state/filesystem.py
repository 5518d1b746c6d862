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
- ``<dir>/index/`` — the listing index, a cache derived from the journals
  (:mod:`zuke.state._fs_index`; how a listing uses and repairs it:
  :mod:`zuke.state._fs_listing`). A write that changes a listed field marks
  the run's row dirty before touching the journal and updates it after.

A run's files (paths, the per-run mutex, reads, whole writes, the scan) are
:mod:`zuke.state._fs_runs`'s; this module is the protocol's writes over them, the
listing and the locks. The directory is created on first write. Ids and keys pass
:func:`~zuke.state._ids.check_id` before any path is built.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from zuke._clock import Clock
from zuke.state import _journal
from zuke.state._files import (
    FileTimeClock,
    append_line,
    ensure_directory,
    remove,
    try_flock,
)
from zuke.state._fs_locks import CLOCK_FILE, FsLocks
from zuke.state._fs_open import OpenJournal, OpenJournals, records_intent
from zuke.state._fs_runs import FsRunFiles
from zuke.state._protocol import (
    RUN_LEASE_PREFIX,
    Conflict,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    Written,
)
from zuke.state.records import RunDelta, RunRecord, RunSummary

if TYPE_CHECKING:  # imported on first use: SQLite is not needed to run a build without state
    from zuke.state._fs_index import RunIndex

_LOG: Final = logging.getLogger("zuke.state")
_EVERY_RUN: Final = RunQuery()


class FileSystemStateStore(FsRunFiles):
    """A :class:`~zuke.state.JournalingStateStore` backed by a directory.

    ``mutex_timeout_s`` bounds the wait for another process's write on the same
    run or lock key; past it the call raises :class:`~zuke.StoreUnavailableError`.
    ``bytes_written`` counts every byte this instance has written to run and
    lock files (for benchmarks and the linear-cost tests; not the index's). The
    run files themselves (paths, reads, whole writes) are :class:`~._fs_runs.FsRunFiles`'s.

    Lock and lease expiry are judged by the filesystem's time (a file the
    store stamps), not this process's clock, so processes whose clocks
    disagree agree on who holds a key; ``clock`` replaces that judge (tests
    inject a :class:`~zuke._clock.ManualClock`). ``self.clock`` reads the
    judge's time.

    Whole-record writes are always fsynced. A journal append is fsynced when it
    changes the run's status (a checkpoint: suspended, finished, cancelled), or
    always with ``sync_appends``; otherwise it is durable against the process
    dying, not against the machine losing power (see ``docs/state.md``).
    """

    #: a write is a small append under a bounded mutex: the engine may make it on the
    #: event loop's thread (``zuke._engine.store_traits.local``)
    inline_writes = True
    #: ``append_run_known``'s ``after`` may be a function making the record (called only
    #: when a compaction is due: ``zuke._engine.store_traits.lazy_after``)
    append_after_lazily = True

    def __init__(
        self,
        directory: str | os.PathLike[str] = ".zuke/runs",
        *,
        clock: Clock | None = None,
        mutex_timeout_s: float = 5.0,
        sync_appends: bool = False,
    ) -> None:
        super().__init__(os.fspath(directory), mutex_timeout_s)
        self.clock: Final[Clock] = clock or FileTimeClock(
            os.path.join(self.directory, "locks", CLOCK_FILE), directory=self.directory
        )
        self.sync_appends: Final[bool] = sync_appends
        self._locks = FsLocks(self.directory, clock, mutex_timeout_s, self._count)
        self._index: RunIndex | None = None
        self._journals = OpenJournals(self.directory)

    def __repr__(self) -> str:
        return f"FileSystemStateStore({self.directory!r})"

    @property
    def display_name(self) -> str:
        """Its directory: the store as messages name it."""
        return self.directory

    @property
    def index(self) -> RunIndex:
        """The listing index (opened on first use)."""
        with self._count_lock:
            if self._index is None:
                from zuke.state._fs_index import RunIndex

                self._index = RunIndex(self.directory, self.mutex_timeout_s)
            return self._index

    def _after(self, change: str, run_id: str, update: Callable[[RunIndex], None]) -> None:
        """Tell the index about a journal write; failing leaves its row dirty, to be re-read."""
        from zuke.state._fs_index import IndexUnavailable

        try:
            update(self.index)
        except IndexUnavailable as exc:
            _LOG.warning(
                "state: could not index the %s of run %r (%s); the next listing re-reads it",
                change,
                run_id,
                exc,
            )

    # ------------------------------------------------------------ runs

    def create_run(self, record: RunRecord) -> Written | Conflict:
        path = self.path_of(record.id)
        with self._run_mutex(record.id):
            if os.path.lexists(path):
                return Conflict()
            return self._write_indexed(path, record, "creation")

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        path = self.path_of(record.id)
        with self._run_mutex(record.id):
            current = self._probe(record.id)
            if current is None or current.version != expected_version:
                return Conflict()
            return self._write_indexed(path, record, "rewrite")

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        return self.append_run_known(run_id, delta, expected_version=expected_version)

    def append_run_known(
        self,
        run_id: str,
        delta: RunDelta,
        *,
        expected_version: str,
        after: RunRecord | Callable[[], RunRecord] | None = None,
    ) -> Written | Conflict:
        """:meth:`append_run`; ``after``, if given, is the record the delta makes (or a
        function making it, called only if a compaction is due).

        The caller (:func:`~zuke.state.update.update_run`, or the run's writer) has it
        already: it applied the delta to the record it read at ``expected_version``, or
        can. Only a version that matches writes anything, so then ``after`` is exactly
        the journal's record once the delta is appended, and a compaction due now
        writes it instead of reading back and parsing the whole journal.
        """
        path = self.path_of(run_id)
        line = _journal.delta_line(delta)
        opened = self._journals.reuse(run_id, path)  # the mutex held by its kept descriptor
        if opened is None:
            return self._append_locking(run_id, path, line, delta, expected_version, after)
        return self._append_held(opened, path, line, delta, expected_version, after)

    def _append_locking(self, run_id: str, path: str, line: bytes, delta: RunDelta,
                        expected: str, after: RunRecord | Callable[[], RunRecord] | None,
                        ) -> Written | Conflict:  # fmt: skip
        """:meth:`append_run_known`, taking the run's mutex from its path (the first append,
        or after another process wrote the run); its descriptor is kept with the journal."""
        if not os.path.isdir(self.directory):  # one stat; created on first write
            ensure_directory(self.directory, directory=self.directory)
        try:
            lock_fd = try_flock(self.mutex_path(run_id))
        except OSError:
            lock_fd = None
        if lock_fd is None:  # held by another writer (or unusable): the bounded wait
            with self._run_mutex(run_id):
                opened = self._journals.open(run_id, path, self.where(run_id))
                if opened is None:
                    return Conflict()
                try:
                    written = self._append_open(opened, path, line, delta, expected, after)
                except BaseException:
                    opened.close()
                    raise
                self._journals.keep(opened)  # without a mutex descriptor: taken afresh next
                return written
        try:
            opened = self._journals.open(run_id, path, self.where(run_id), lock_fd)
        except BaseException:
            os.close(lock_fd)  # releases the mutex
            raise
        if opened is None:
            os.close(lock_fd)
            return Conflict()
        return self._append_held(opened, path, line, delta, expected, after)

    def _append_held(self, opened: OpenJournal, path: str, line: bytes, delta: RunDelta,
                     expected: str, after: RunRecord | Callable[[], RunRecord] | None,
                     ) -> Written | Conflict:  # fmt: skip
        """The append on ``opened``, whose mutex is held through ``opened.lock_fd``; then
        the mutex is released and the entry kept for the next append."""
        try:
            written = self._append_open(opened, path, line, delta, expected, after)
        except BaseException:
            opened.close()  # releases the mutex
            raise
        if opened.fd < 0:  # a compaction replaced the journal: nothing to keep
            opened.close()
        else:
            opened.unlock()
            self._journals.keep(opened)
        return written

    def _append_open(self, opened: OpenJournal, path: str, line: bytes, delta: RunDelta,
                     expected: str, after: RunRecord | Callable[[], RunRecord] | None,
                     ) -> Written | Conflict:  # fmt: skip
        """:meth:`append_run_known` on the journal ``opened`` (under the run's mutex)."""
        run_id, current = opened.run_id, opened.probe
        if current.version != expected:
            return Conflict()
        listed = delta.status is not None or delta.actor is not None
        if listed:  # a field the index lists changes: mark it first
            self.index.mark(run_id)
        # A torn tail can only be a dead appender's: live ones hold this mutex.
        truncate_to = current.valid if current.torn else None
        # Checkpoints are fsynced: status changes, and an effect's intent (it must
        # survive a power cut before the effect's body runs).
        sync = self.sync_appends or delta.status is not None or records_intent(delta)
        self._count(append_line(path, line, truncate_to=truncate_to, directory=self.directory,
                                sync=sync, fd=opened.fd))  # fmt: skip
        length = current.valid + len(line)
        written = Written(version=_journal.version_of(current.header.gen, length))
        compact = current.journal_bytes + len(line) > max(
            current.header.base, _journal.COMPACT_MIN_BYTES
        )
        if compact:
            # Rewriting costs about base + journal bytes and happens only after
            # more than `base` bytes of deltas, so total bytes stay linear.
            opened.close_journal()  # the journal is replaced: the next append opens the new one
            if after is None:
                written = self._compact(run_id, path)
            else:
                written = self._write_whole(path, after() if callable(after) else after)
        else:
            opened.appended(len(line))
        if listed or compact:
            gen = _journal.gen_of(written.version)
            seen = self._seen(path, written.version)
            self._after("change", run_id, lambda index: index.update(
                run_id, gen=gen, seen=seen, updated_at=delta.updated_at,
                status=delta.status, actor=delta.actor, settle=listed,
            ))  # fmt: skip
        return written

    def _write_indexed(self, path: str, record: RunRecord, change: str) -> Written:
        self.index.mark(record.id)
        written = self._write_whole(path, record)
        gen = _journal.gen_of(written.version)
        seen = self._seen(path, written.version)
        self._after(change, record.id, lambda index: index.put(record, gen, seen))
        return written

    def delete_run(self, run_id: str) -> None:
        path = self.path_of(run_id)
        if not os.path.isdir(self.directory):
            return
        with self._run_mutex(run_id):
            if os.path.lexists(path):
                self.index.mark(run_id)
            remove(path, directory=self.directory)
            self._after("deletion", run_id, lambda index: index.remove(run_id))
            # The run is gone, so its mutex file can go too: a process still waiting
            # on it finds no run once it gets it. Deleting it while held keeps a new
            # opener from locking a second file while we hold the first.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.mutex_path(run_id))
        # The run's own lease key is never taken again: its files go too.
        self._locks.forget(RUN_LEASE_PREFIX + run_id)

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        from zuke.state import _fs_listing

        return _fs_listing.list_runs(self, query)

    def rebuild_index(self) -> None:
        """Rebuild the listing index from the journals (after copying run files in by hand)."""
        from zuke.state import _fs_listing

        if not os.path.isdir(self.directory):
            return
        self.index.clear_complete()
        _fs_listing.rebuild(self, wait=True)

    # ------------------------------------------------------------ locks

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        return self._locks.acquire(key, holder, ttl_ms)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        return self._locks.renew(key, token, ttl_ms)

    def release_lock(self, key: str, token: str) -> None:
        self._locks.release(key, token)

    def break_lock(self, key: str) -> LockHolder | None:
        return self._locks.break_claim(key)

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        return self._locks.entries(run_id)
