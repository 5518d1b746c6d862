"""The filesystem store's run files: where a run's journal is, reading it, writing it whole.

Apart from :mod:`zuke.state.filesystem` (the store: the compare-and-swap writes that keep
the listing index told, the listing, the locks) because a run's files — their paths, checked
and built once per run id, the per-run mutex, a journal read with the ``fstat`` the index
needs, a whole record written atomically — are what every write and every listing stands
on, and hold no index or lock of their own.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from typing import Final

from zuke._errors import CorruptRecordError, StoreUnavailableError, UnsafeIdError
from zuke.state import _journal
from zuke.state._files import atomic_write, ensure_directory, mutex, os_failure, read_to_end
from zuke.state._ids import check_id
from zuke.state._protocol import StoredRun, Written
from zuke.state.records import RunRecord

_LOG: Final = logging.getLogger("zuke.state")


class FsRunFiles:
    """A directory of run journals: paths, the per-run mutex, reads and whole writes.

    ``bytes_written`` counts every byte written to run and lock files (for benchmarks and the
    linear-cost tests; not the index's).
    """

    def __init__(self, directory: str, mutex_timeout_s: float) -> None:
        self.directory: Final[str] = directory
        self.mutex_timeout_s: Final[float] = mutex_timeout_s
        self.bytes_written = 0
        self._count_lock = threading.Lock()
        self._path_cache: dict[str, tuple[str, str, str]] = {}

    def _count(self, n: int) -> None:
        with self._count_lock:
            self.bytes_written += n

    def path_of(self, run_id: str) -> str:
        """The journal file of ``run_id``."""
        return self._paths(run_id)[0]

    def where(self, run_id: str) -> str:
        return self._paths(run_id)[2]

    def mutex_path(self, run_id: str) -> str:
        return self._paths(run_id)[1]

    def _paths(self, run_id: str) -> tuple[str, str, str]:
        """The journal, the mutex and how messages name the run: checked and built once per
        run id (a run's writer asks on every append)."""
        found = self._path_cache.get(run_id)
        if found is None:
            base = os.path.join(self.directory, check_id(run_id))
            journal = base + _journal.SUFFIX
            found = (journal, base + ".lock", f"run {run_id!r} ({journal})")
            if len(self._path_cache) >= 1024:  # a listing walks many runs: stay small
                self._path_cache.clear()
            self._path_cache[run_id] = found
        return found

    def _run_mutex(self, run_id: str) -> AbstractContextManager[None]:
        if not os.path.isdir(self.directory):  # one stat; created on first write
            ensure_directory(self.directory, directory=self.directory)
        return mutex(self.mutex_path(run_id), self.mutex_timeout_s, directory=self.directory)

    def _probe(self, run_id: str) -> _journal.Probe | None:
        path = self.path_of(run_id)
        try:
            return _journal.probe(path, self.where(run_id))
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self.directory) from None

    def get_run(self, run_id: str) -> StoredRun | None:
        found = self.read_run(run_id)
        return None if found is None else found[0]

    def read_run(self, run_id: str) -> tuple[StoredRun, os.stat_result] | None:
        """:meth:`get_run`, and the journal's ``fstat`` taken before it was read (for the index)."""
        path = self.path_of(run_id)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self.directory) from None
        try:
            st = os.fstat(fd)
            data = read_to_end(fd, st.st_size)
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self.directory) from None
        finally:
            os.close(fd)
        record, version = _journal.read(data, self.where(run_id))
        if record.id != run_id:
            raise CorruptRecordError(
                f"state: {self.where(run_id)} holds a record with id {record.id!r}"
            )
        return StoredRun(record=record, version=version), st

    def _seen(self, path: str, version: str) -> _journal.Seen | None:
        """The journal just written (under its mutex), as its index row should remember it."""
        try:
            return _journal.seen(_journal.length_of(version), os.stat(path))
        except OSError:
            return None  # the row is still right; the next listing reads the journal

    def _write_whole(self, path: str, record: RunRecord) -> Written:
        data, version = _journal.compacted(record)
        self._count(atomic_write(path, data, directory=self.directory))
        return Written(version=version)

    def _compact(self, run_id: str, path: str) -> Written:
        stored = self.get_run(run_id)
        if stored is None:  # cannot happen under the mutex; be loud if it does
            raise StoreUnavailableError(f"state: {self.where(run_id)} vanished while compacting")
        return self._write_whole(path, stored.record)

    def scan(self) -> Iterator[RunRecord]:
        """Every readable run, read from its journal (the listing without the index)."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return iter(())
        except OSError as exc:
            raise os_failure("list", self.directory, exc, directory=self.directory) from None
        return self._scan(names)

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
