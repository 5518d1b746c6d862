"""The filesystem store's open journal: append to a run's journal without re-reading it.

A run's writer appends to one journal once a target (group commit), and each
append is a compare-and-swap: the journal must still be at the version the
writer last saw. Proving that used to cost a fresh open, an ``fstat``, two
``pread`` calls and a JSON parse of the header on every append, then another
open for the write itself — the largest share of a transition after the
engine's own bookkeeping (``docs/benchmarks.md``, Step 18).

Here the store keeps the descriptor of the journal it last appended to (one,
whatever the number of runs), with what that append left: the header, the
length, and the file's identity and times (``fstat`` after the write). Under
the run's mutex, a ``stat`` of the path that shows the same device, inode,
size, mtime and ctime proves nobody has written the journal since:

- while the descriptor is open its inode cannot be reused, so the same inode
  is the same file (a compaction or ``put_run`` renames a new file in; a
  deletion unlinks it: both change what the path names);
- an append by another process grows the file; cutting a torn tail stops at
  the last complete line, which this length counts; and any write, truncation
  or in-place copy changes mtime and ctime (the rule the listing index already
  trusts for "not written since" is size and mtime alone).

Then the version is known without reading, and the line goes out through the
same descriptor: ``stat`` + ``write`` + ``fstat`` instead of two opens, an
``fstat``, two reads, a parse and two closes. Anything else falls back to the
full probe (:func:`zuke.state._journal.probe`'s reads, on a descriptor opened
for both reading and appending). Every write is still the same single
``write()`` of one complete line, fsynced when it was before, so a crash at
any point leaves what it left before.
"""

from __future__ import annotations

import contextlib
import os
import threading
from dataclasses import dataclass

from zuke.state import _journal
from zuke.state._files import os_failure
from zuke.state.records import RunDelta


def records_intent(delta: RunDelta) -> bool:
    """Whether ``delta`` records an effect about to run (a ``pending`` effect row): an
    append that must be fsynced, like a status change (it must survive a power cut
    before the effect's body runs)."""
    return any(
        effect.status == "pending"
        for row in delta.targets.values()
        for effect in row.effects.values()
    )


@dataclass
class OpenJournal:
    """A run's journal, open for reading and appending, and what is known of it."""

    run_id: str
    fd: int
    #: the header and the length this process last saw (read, or left by its own append)
    probe: _journal.Probe
    #: (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) when ``probe`` was last right
    stamp: tuple[int, int, int, int, int]

    def close(self) -> None:
        """Close the descriptor (once: a closed entry is never kept again)."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def appended(self, length: int) -> None:
        """This process appended ``length`` bytes (one complete line) through ``fd``."""
        size = self.probe.valid + length
        self.probe = _journal.Probe(header=self.probe.header, size=size, valid=size)
        try:
            self.stamp = _stamp(os.fstat(self.fd))
        except OSError:  # the line is written; the next append just probes afresh
            self.stamp = (-1, -1, -1, -1, -1)


def _stamp(st: os.stat_result) -> tuple[int, int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class OpenJournals:
    """The one journal descriptor a store keeps open between appends (thread-safe).

    :meth:`open` hands the entry to one caller at a time (it is taken out while
    in use, under the run's mutex) and :meth:`keep` puts it back, closing the
    one it replaces, so a long-lived process holds at most one descriptor here.
    """

    def __init__(self, directory: str) -> None:
        self._directory = directory
        self._lock = threading.Lock()
        self._kept: OpenJournal | None = None

    def open(self, run_id: str, path: str, where: str) -> OpenJournal | None:
        """``run_id``'s journal as it is now (the caller holds its mutex); ``None`` if absent."""
        with self._lock:
            kept = self._kept
            if kept is not None and kept.run_id == run_id:
                self._kept = None
            else:
                kept = None
        if kept is not None:
            try:
                same = _stamp(os.stat(path)) == kept.stamp
            except OSError:
                same = False
            if same:
                return kept
            kept.close()
        try:
            fd = os.open(path, os.O_RDWR | os.O_APPEND)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise os_failure("read", path, exc, directory=self._directory) from None
        try:
            st = os.fstat(fd)
            found = _journal.probe_fd(fd, where, st.st_size)
        except BaseException as exc:
            os.close(fd)
            if isinstance(exc, OSError):
                raise os_failure("read", path, exc, directory=self._directory) from None
            raise
        return OpenJournal(run_id, fd, found, _stamp(st))

    def keep(self, journal: OpenJournal) -> None:
        """Keep ``journal`` open for the next append (closing the one kept before)."""
        if journal.fd < 0:
            return
        with self._lock:
            old, self._kept = self._kept, journal
        if old is not None and old is not journal:
            old.close()

    def close(self) -> None:
        """Close the kept descriptor, if any."""
        with self._lock:
            old, self._kept = self._kept, None
        if old is not None:
            old.close()


__all__ = ["OpenJournal", "OpenJournals", "records_intent"]
