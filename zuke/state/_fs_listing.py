"""``list_runs`` of the filesystem store: answer from the index, repair it, or fall back to a scan.

A listing (:func:`list_runs`):

1. makes sure the index is *complete* (covers every journal): if not — a
   directory written before the index existed, or an index that was deleted or
   quarantined — it rebuilds it from the journals (or waits, at most the
   store's mutex timeout, for another process that is rebuilding it);
2. re-reads every *dirty* row whose run's mutex is free (a writer that died
   between marking the row and updating it); a row whose mutex is held belongs
   to a write in flight and is read from its journal below;
3. takes the matching rows newest first, a page at a time, and for each reads
   the journal's ends (:func:`zuke.state._journal.tail`): the last delta's
   ``updatedAt`` completes the summary. A row whose journal is gone is dropped
   (and removed); one whose journal ``gen`` is not the row's (a whole write the
   index missed), or that is dirty, is read in full and filtered again.

So a listing costs a few small reads per run it returns. When the index cannot
be used at all (a read-only directory, SQLite failing) the listing scans every
journal, as before the index, and logs a warning saying so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Final

from zuke._errors import CorruptRecordError, StoreUnavailableError, UnsafeIdError
from zuke.state import _journal
from zuke.state._files import mutex, os_failure, try_mutex
from zuke.state._fs_index import IndexUnavailable, Row, RunIndex
from zuke.state._ids import check_id
from zuke.state._protocol import RunQuery
from zuke.state._query import limited, matches, select, since_ms
from zuke.state.records import RunRecord, RunSummary

if TYPE_CHECKING:
    from zuke.state.filesystem import FileSystemStateStore

_LOG: Final = logging.getLogger("zuke.state")


def list_runs(store: FileSystemStateStore, query: RunQuery) -> list[RunSummary]:
    since_ms(query)  # a bad `since` is the caller's error, whichever way we list
    if not os.path.isdir(store.directory):
        return []
    for attempt in (1, 2):
        try:
            return _from_index(store, store.index, query)
        except IndexUnavailable as exc:
            problem = str(exc)
            if exc.corrupt and attempt == 1:
                try:
                    store.index.recover(exc.inode)
                except StoreUnavailableError as failed:
                    problem = str(failed)
                else:
                    continue
        except StoreUnavailableError as exc:  # e.g. a run's mutex held through a rebuild
            problem = str(exc)
        _LOG.warning(
            "state: listing %s by reading every run file: the run index is not usable (%s)",
            store.directory,
            problem,
        )
        break
    return select(store.scan(), query)


def _from_index(store: FileSystemStateStore, index: RunIndex, query: RunQuery) -> list[RunSummary]:
    # Another process's rebuild is waited for (bounded): it is faster than a scan.
    if not index.complete() and not rebuild(store, wait=True):
        raise IndexUnavailable("it could not be rebuilt")
    for run_id in index.dirty():
        repair(store, run_id)
    limit = limited(query)
    if limit == 0:
        return []
    found: list[RunSummary] = []
    for row in index.rows(query, batch=500 if limit is None else limit + 8):
        summary = _current(store, row, query)
        if summary is not None:
            found.append(summary)
            if limit is not None and len(found) >= limit:
                break
    return found


def _current(store: FileSystemStateStore, row: Row, query: RunQuery) -> RunSummary | None:
    """The row's summary as of now, or ``None`` if the run is gone or no longer matches."""
    run_id = row.summary.id
    path = store.path_of(run_id)
    where = store.where(run_id)
    try:
        tail = _journal.tail(path, where)
    except CorruptRecordError as exc:
        _LOG.warning("state: skipping unreadable run file %s: %s", path, exc)
        return None
    except OSError as exc:
        raise os_failure("read", path, exc, directory=store.directory) from None
    if tail is None:  # deleted by hand, or since the row was read
        repair(store, run_id)
        return None
    if tail.gen == row.gen and not row.dirty:
        if not tail.deltas:
            return row.summary
        if tail.updated_at is not None:
            return replace(row.summary, updated_at=tail.updated_at)
    try:
        stored = store.get_run(run_id)
    except CorruptRecordError as exc:
        _LOG.warning("state: skipping unreadable run file %s: %s", path, exc)
        return None
    if stored is None:
        return None
    if tail.gen != row.gen:
        repair(store, run_id)
    return stored.record.summary() if matches(stored.record, query) else None


def repair(store: FileSystemStateStore, run_id: str) -> None:
    """Re-index ``run_id`` from its journal, unless a write holds its mutex right now."""
    with try_mutex(store.mutex_path(run_id)) as held:
        if held:
            reindex(store, run_id)


def reindex(store: FileSystemStateStore, run_id: str) -> None:
    """Make ``run_id``'s row match its journal. Call it holding the run's mutex."""
    record, gen = _read(store, run_id)
    if record is not None:
        store.index.put(record, gen)
        return
    store.index.remove(run_id)
    _drop_stray_mutex(store, run_id)


def _read(store: FileSystemStateStore, run_id: str) -> tuple[RunRecord | None, str]:
    try:
        stored = store.get_run(run_id)
    except CorruptRecordError as exc:
        _LOG.warning("state: leaving unreadable run file out of the index: %s", exc)
        return None, ""
    if stored is None:
        return None, ""
    return stored.record, _journal.gen_of(stored.version)


def _drop_stray_mutex(store: FileSystemStateStore, run_id: str) -> None:
    if not os.path.lexists(store.path_of(run_id)):
        # Taking the mutex of a run that is gone created its file; it goes again,
        # while held, exactly as delete_run removes it.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store.mutex_path(run_id))


def rebuild(store: FileSystemStateStore, *, wait: bool) -> bool:
    """Re-index every journal (and drop rows without one); ``False`` if another process is at it.

    Each run is re-read under its mutex, so a writer working meanwhile is never
    overwritten by an older read; runs created meanwhile index themselves.
    """
    index = store.index
    with index.rebuilding(wait=wait) as held:
        if not held:
            return False
        if index.complete():  # finished by another process while we waited
            return True
        try:
            names = os.listdir(store.directory)
        except OSError as exc:
            raise os_failure("list", store.directory, exc, directory=store.directory) from None
        ids = set()
        for name in names:
            if not name.endswith(_journal.SUFFIX):
                continue
            try:
                ids.add(check_id(name[: -len(_journal.SUFFIX)]))
            except UnsafeIdError:
                _LOG.warning("state: skipping %s in %s: not a run file", name, store.directory)
        busy = _reindex_all(store, sorted(ids | index.ids()))
        for run_id in busy:  # mutexes that were held: wait for each in turn
            with mutex(store.mutex_path(run_id), store.mutex_timeout_s, directory=store.directory):
                reindex(store, run_id)
        index.set_complete()
        return True


_BATCH = 128


def _reindex_all(store: FileSystemStateStore, run_ids: list[str]) -> list[str]:
    """Re-index ``run_ids`` a batch per transaction; returns those whose mutex was held.

    A batch's mutexes are only tried, never waited for, and no transaction is
    open while they are taken, so a writer holding one cannot deadlock with us.
    """
    busy = []
    for start in range(0, len(run_ids), _BATCH):
        with contextlib.ExitStack() as held:
            mine = []
            for run_id in run_ids[start : start + _BATCH]:
                if held.enter_context(try_mutex(store.mutex_path(run_id))):
                    mine.append(run_id)
                else:
                    busy.append(run_id)
            rows = [(run_id, *_read(store, run_id)) for run_id in mine]
            store.index.apply(rows)
            for run_id, record, _ in rows:
                if record is None:
                    _drop_stray_mutex(store, run_id)
    return busy
