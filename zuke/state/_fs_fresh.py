"""Whether an index row still describes its journal, checked as cheaply as the journal allows.

The index is told of every write this zuke makes (:mod:`zuke.state._fs_index`),
but a journal can change behind its back: copied over, restored, or appended
to by a zuke without the index. So a listing checks each row it uses against
the file, cheapest test first:

1. ``stat`` the journal: the same size and mtime as the row last saw
   (:class:`~zuke.state._journal.Seen`) means nothing was written since — the
   row is the answer, no read at all;
2. otherwise read its ends (:func:`~zuke.state._journal.tail`): the same
   ``gen`` and no line after the seen length that sets ``status`` or
   ``actor`` means the row is still right but for ``updatedAt``, read from the
   last line. The index is then told the new length (:meth:`Checker.confirm`,
   one transaction per listing), so the next listing stops at step 1;
3. anything else — another ``gen``, a listed change, a dirty row, a layout
   this code did not write — and the row is stale: the caller reads the
   journal in full and re-indexes it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Final, Literal

from zuke.state import _journal
from zuke.state._files import os_failure
from zuke.state._fs_index import IndexUnavailable
from zuke.state._fs_rows import Row
from zuke.state.records import RunSummary

if TYPE_CHECKING:
    from zuke.state._fs_shape import FsStore

_LOG: Final = logging.getLogger("zuke.state")

Verdict = RunSummary | Literal["gone", "stale"]


class Checker:
    """Checks rows for one listing, and remembers what it confirmed."""

    def __init__(self, store: FsStore) -> None:
        self._store = store
        self._confirmed: list[tuple[Row, _journal.Seen, str | None]] = []

    def check(self, row: Row) -> Verdict:
        """The run's summary as of now if ``row`` still describes it; ``"gone"``; ``"stale"``.

        Raises :class:`~zuke.CorruptRecordError` for a journal that does not parse.
        """
        run_id = row.summary.id
        path = self._store.path_of(run_id)
        try:
            if not row.dirty and row.seen is not None and row.seen.matches(os.stat(path)):
                return row.summary
            since = None if row.seen is None else row.seen.length
            tail = _journal.tail(path, self._store.where(run_id), since=since)
        except FileNotFoundError:
            return "gone"
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self._store.directory) from None
        if tail is None:
            return "gone"
        if row.dirty or tail.gen != row.gen:
            return "stale"
        if tail.deltas and (tail.listed is not False or tail.updated_at is None):
            return "stale"
        now = tail.seen
        if now is not None and now != row.seen:
            self._confirmed.append((row, now, tail.updated_at))
        if tail.updated_at is None:  # no delta: the record line is the whole run
            return row.summary
        return replace(row.summary, updated_at=tail.updated_at)

    def confirm(self) -> None:
        """Tell the index what this listing confirmed (best effort: a failure costs a re-check)."""
        if not self._confirmed:
            return
        try:
            self._store.index.confirm(self._confirmed)
        except IndexUnavailable as exc:
            _LOG.debug("state: could not note the journals a listing checked: %s", exc)
        self._confirmed.clear()
