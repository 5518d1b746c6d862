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

The descriptor of the run's mutex file (``<run id>.lock``) is kept with it, so the
next append takes the mutex with one ``flock`` instead of a ``stat`` of the
directory, an ``open``, the ``flock`` and a ``close`` (:meth:`OpenJournals.reuse`).
That descriptor still names the mutex every other process opens while the
journal is unchanged: only ``delete_run`` unlinks a run's mutex file, and it
removes the journal first, under the mutex — so a journal that is the same
inode, size and times as this process left it (the inode cannot be reused while
the journal's descriptor is open) proves the mutex file was not unlinked since.
The ``flock`` is taken before that check, so a deletion cannot slip between them.
Anything else closes both and takes the mutex afresh from its path.
"""

from __future__ import annotations

import contextlib
import fcntl
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
    #: the run's mutex file, open (``-1``: not kept); ``flock``-ed while an append is made
    lock_fd: int = -1

    def close(self) -> None:
        """Close the descriptors (once: a closed entry is never kept again); closing the
        mutex's releases it if it is held."""
        fd, self.fd = self.fd, -1
        lock_fd, self.lock_fd = self.lock_fd, -1
        for each in (fd, lock_fd):
            if each >= 0:
                with contextlib.suppress(OSError):
                    os.close(each)

    def close_journal(self) -> None:
        """Close the journal's descriptor only (a compaction replaces the file); the mutex
        stays held until :meth:`close`."""
        fd, self.fd = self.fd, -1
        if fd >= 0:
            with contextlib.suppress(OSError):
                os.close(fd)

    def unlock(self) -> None:
        """Release the mutex held through :attr:`lock_fd` (the descriptor stays open)."""
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        except OSError:  # cannot happen on a descriptor we hold it by; never keep it then
            lock_fd, self.lock_fd = self.lock_fd, -1
            with contextlib.suppress(OSError):
                os.close(lock_fd)

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

    def reuse(self, run_id: str, path: str) -> OpenJournal | None:
        """The kept entry of ``run_id``, its mutex held through its own descriptor and its
        journal unchanged since this process's last append; ``None`` (and nothing held)
        otherwise: the caller takes the mutex from its path and calls :meth:`open`."""
        with self._lock:
            kept = self._kept
            if kept is None or kept.run_id != run_id or kept.lock_fd < 0:
                return None
            self._kept = None
        try:
            fcntl.flock(kept.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another process writes the run now: the path's bounded wait
            kept.close()
            return None
        try:
            same = _stamp(os.stat(path)) == kept.stamp
        except OSError:
            same = False
        if same:
            return kept
        kept.close()  # releases the mutex: the caller takes it afresh
        return None

    def open(self, run_id: str, path: str, where: str, lock_fd: int = -1) -> OpenJournal | None:
        """``run_id``'s journal as it is now (the caller holds its mutex, through ``lock_fd``
        if it is given: kept with the journal); ``None`` if absent."""
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
                if kept.lock_fd >= 0:  # a descriptor of the mutex the caller holds by its own
                    with contextlib.suppress(OSError):
                        os.close(kept.lock_fd)
                kept.lock_fd = lock_fd
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
        return OpenJournal(run_id, fd, found, _stamp(st), lock_fd)

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
