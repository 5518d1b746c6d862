"""``list_runs`` of the filesystem store: answer from the index, repair it, or fall back to a scan.

A listing (:func:`list_runs`):

1. makes sure the index is *complete* (covers every journal): if not — a
   directory written before the index existed, or an index that was deleted or
   quarantined — it rebuilds it from the journals (or waits, at most the
   store's mutex timeout, for another process that is rebuilding it);
2. indexes journals the index has no row for — copied in, restored, written
   by a zuke without the index — when the directory's stamp moved since the
   last look (:func:`find_new`: one ``stat`` when nothing moved);
3. re-reads every *dirty* row whose run's mutex is free (a writer that died
   between marking the row and updating it); a row whose mutex is held belongs
   to a write in flight and is read from its journal below;
4. for a status query, checks the rows it would leave out only for their
   status while that status may still change (running, suspended, cancelling)
   and re-indexes those whose journal moved on behind the index;
5. takes the matching rows newest first, a page at a time, and checks each
   against its journal (:mod:`zuke.state._fs_fresh`: usually one ``stat``,
   else the journal's ends). A row whose journal is gone is dropped (and
   removed); a stale one is read in full, re-indexed and filtered again; one
   whose journal no longer parses is listed as last indexed, with a warning.

So a listing costs about a ``stat`` per run it returns, plus one per open run
a status query leaves out. When the index cannot be used at all (a read-only
directory, SQLite failing) the listing scans every journal, as before the
index, and logs a warning saying so.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import TYPE_CHECKING, Final

from zuke._errors import CorruptRecordError, StoreUnavailableError, UnsafeIdError
from zuke.state import _journal
from zuke.state._files import FileTimeClock, mutex, os_failure, try_mutex
from zuke.state._fs_fresh import Checker
from zuke.state._fs_index import IndexUnavailable, RunIndex
from zuke.state._fs_rows import UNREADABLE, Row
from zuke.state._ids import check_id
from zuke.state._journal import Seen
from zuke.state._protocol import RunQuery
from zuke.state._query import limited, matches, select, since_ms
from zuke.state.records import RunRecord, RunSummary

if TYPE_CHECKING:
    from zuke.state._fs_shape import FsStore

_LOG: Final = logging.getLogger("zuke.state")


def list_runs(store: FsStore, query: RunQuery) -> list[RunSummary]:
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


def _from_index(store: FsStore, index: RunIndex, query: RunQuery) -> list[RunSummary]:
    complete, stamp = index.state()
    # Another process's rebuild is waited for (bounded): it is faster than a scan.
    if not complete and not rebuild(store, wait=True):
        raise IndexUnavailable("it could not be rebuilt")
    find_new(store, index, stamp)
    for run_id in index.dirty():
        repair(store, run_id)
    checker = Checker(store)
    if query.status is not None:
        _recheck_others(store, index, query, checker)
    limit = limited(query)
    found: list[RunSummary] = []
    if limit != 0:
        for row in index.rows(query, batch=500 if limit is None else limit + 8):
            summary = _current(store, row, query, checker)
            if summary is not None:
                found.append(summary)
                if limit is not None and len(found) >= limit:
                    break
    checker.confirm()
    return found


def _current(store: FsStore, row: Row, query: RunQuery, checker: Checker) -> RunSummary | None:
    """The row's summary as of now, or ``None`` if the run is gone or no longer matches."""
    run_id = row.summary.id
    try:
        verdict = checker.check(row)
        if verdict == "gone":  # deleted by hand, or since the row was read
            repair(store, run_id)
            return None
        if verdict != "stale":
            return verdict
        stored = store.get_run(run_id)
    except CorruptRecordError as exc:
        return _unreadable(store, row, exc)
    if stored is None:
        return None
    repair(store, run_id)
    return stored.record.summary() if matches(stored.record, query) else None


def _unreadable(store: FsStore, row: Row, exc: CorruptRecordError) -> RunSummary:
    """An indexed run whose journal stopped parsing is listed as last indexed, warned of once.

    Leaving it out would hide it from a sweep, which reports it when it reads it.
    """
    run_id = row.summary.id
    _LOG.warning("state: keeping run %r as last indexed (reading it reports this): %s", run_id, exc)
    with contextlib.suppress(IndexUnavailable):
        store.index.unreadable(run_id, _as_is(store, run_id), settle=False)
    return row.summary


def _recheck_others(store: FsStore, index: RunIndex, query: RunQuery, checker: Checker) -> None:
    """Re-index the rows a status query leaves out whose journal moved on behind the index.

    Only rows of a status a live process may still change (running, suspended,
    cancelling): those are few, and usually cost one ``stat`` each.
    """
    for row in index.others(query):
        try:
            verdict = checker.check(row)
        except CorruptRecordError as exc:
            _unreadable(store, row, exc)
            continue
        if isinstance(verdict, str):
            repair(store, row.summary.id)


def find_new(store: FsStore, index: RunIndex, stamp: str | None) -> None:
    """Index the journals the index has no row for, if the directory changed since the last look.

    A journal that arrived behind the index's back (copied in, restored,
    written by a zuke without the index) adds a directory entry, which moves
    the directory's mtime; so one ``stat`` tells whether to look. Looking is
    one directory listing and one query; the stamp is then recorded, unless
    a new journal's mutex was held (a writer is at it: look again next time)
    or the directory changed too recently to tell a later change apart (its
    mtime not before the filesystem's time when we looked: look again).
    """
    try:
        if _stamp(os.stat(store.directory)) == stamp:
            return
        clock = FileTimeClock(os.path.join(index.folder, "clock"), directory=store.directory)
        before_ms = clock.now_ms()
        st = os.stat(store.directory)
        names = os.listdir(store.directory)
    except OSError as exc:
        raise os_failure("list", store.directory, exc, directory=store.directory) from None
    settled = st.st_mtime_ns < before_ms * 1_000_000
    for run_id in sorted(_run_ids(store, names, warn=False) - index.ids()):
        with try_mutex(store.mutex_path(run_id)) as held:
            if held:
                reindex(store, run_id)
            else:
                settled = False
    if settled:
        index.set_stamp(_stamp(st))


def _stamp(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_mtime_ns}"


def _run_ids(store: FsStore, names: list[str], *, warn: bool) -> set[str]:
    """The run ids of the journals among ``names``; ``warn`` of other names (in a rebuild)."""
    ids = set()
    for name in names:
        if not name.endswith(_journal.SUFFIX):
            continue
        try:
            ids.add(check_id(name[: -len(_journal.SUFFIX)]))
        except UnsafeIdError:
            if warn:
                _LOG.warning("state: skipping %s in %s: not a run file", name, store.directory)
    return ids


def repair(store: FsStore, run_id: str) -> None:
    """Re-index ``run_id`` from its journal, unless a write holds its mutex right now."""
    with try_mutex(store.mutex_path(run_id)) as held:
        if held:
            reindex(store, run_id)


def reindex(store: FsStore, run_id: str) -> None:
    """Make ``run_id``'s row match its journal. Call it holding the run's mutex."""
    record, gen, seen = _read(store, run_id)
    if record is not None:
        store.index.put(record, gen, seen)
        return
    if gen == UNREADABLE:
        store.index.unreadable(run_id, seen, settle=True)
        return
    store.index.remove(run_id)
    _drop_stray_mutex(store, run_id)


def _read(store: FsStore, run_id: str) -> tuple[RunRecord | None, str, Seen | None]:
    try:
        found = store.read_run(run_id)
    except CorruptRecordError as exc:
        _LOG.warning("state: cannot index an unreadable run file: %s", exc)
        return None, UNREADABLE, _as_is(store, run_id)
    if found is None:
        return None, "", None
    stored, st = found
    return (
        stored.record,
        _journal.gen_of(stored.version),
        _journal.seen(_journal.length_of(stored.version), st),
    )


def _as_is(store: FsStore, run_id: str) -> Seen | None:
    """A journal as it is now, whatever it holds (for one that does not parse)."""
    try:
        st = os.stat(store.path_of(run_id))
    except OSError:
        return None
    return _journal.seen(st.st_size, st)


def _drop_stray_mutex(store: FsStore, run_id: str) -> None:
    if not os.path.lexists(store.path_of(run_id)):
        # Taking the mutex of a run that is gone created its file; it goes again,
        # while held, exactly as delete_run removes it.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store.mutex_path(run_id))


def rebuild(store: FsStore, *, wait: bool) -> bool:
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
        busy = _reindex_all(store, sorted(_run_ids(store, names, warn=True) | index.ids()))
        for run_id in busy:  # mutexes that were held: wait for each in turn
            with mutex(store.mutex_path(run_id), store.mutex_timeout_s, directory=store.directory):
                reindex(store, run_id)
        index.set_complete()
        return True


_BATCH = 128


def _reindex_all(store: FsStore, run_ids: list[str]) -> list[str]:
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
            for run_id, record, _, _ in rows:
                if record is None:
                    _drop_stray_mutex(store, run_id)
    return busy
