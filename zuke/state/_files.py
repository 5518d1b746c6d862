"""File primitives for the filesystem store: the mutex, atomic writes, appends, OS errors.

Everything here exists so that :mod:`zuke.state.filesystem` and
:mod:`zuke.state._fs_locks` never leave a half-written file behind and never
let a raw ``OSError`` escape: a full write goes to a temp file, is fsynced and
renamed over the target (then the directory is fsynced so the rename itself is
durable); an append is one ``write()`` of one complete line on an ``O_APPEND``
descriptor, followed by ``fsync``. Every ``OSError`` is translated into a
:class:`~zuke.StoreUnavailableError` whose message names the path and says
what to do about it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager

from zuke._errors import StoreUnavailableError

# Errors that mean "this directory is not somewhere we may write", as opposed to
# a transient failure: the fix is the operator's, so the message says what to do.
_NOT_WRITABLE = frozenset({errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST})


def os_failure(action: str, path: str, exc: OSError, *, directory: str) -> StoreUnavailableError:
    """A :class:`StoreUnavailableError` for ``exc``, naming ``path`` and the fix."""
    reason = exc.strerror or type(exc).__name__
    if exc.errno in _NOT_WRITABLE:
        advice = (
            f"fix the permissions of the state directory {directory!r} "
            "(or of its parents), or point ZUKE_STATE_DIR at a writable directory"
        )
    else:
        advice = f"check the state directory {directory!r} (disk space, mount) and retry"
    return StoreUnavailableError(f"state: cannot {action} {path!r}: {reason}; {advice}")


def ensure_directory(path: str, *, directory: str) -> None:
    """Create ``path`` (the store ``directory`` or a folder in it) on first write."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise os_failure("create the directory", path, exc, directory=directory) from None


def remove(path: str, *, directory: str) -> None:
    """Remove ``path``; one already gone is removed. Any other failure is one line naming
    the path and the fix (:func:`os_failure`)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise os_failure("remove", path, exc, directory=directory) from None


def mutex(path: str, timeout_s: float, *, directory: str) -> AbstractContextManager[None]:
    """Hold the cross-process mutex ``path`` for the block, waiting at most ``timeout_s``."""
    return _Mutex(path, timeout_s, directory)


class _Mutex:
    """:func:`mutex` as a plain object: the uncontended ``flock`` (nearly every journal
    append, one a transition) without two generator frames around it; a contended or
    failing one goes through :func:`_held`, which waits and says what was wrong."""

    __slots__ = ("_directory", "_fd", "_path", "_slow", "_timeout_s")

    def __init__(self, path: str, timeout_s: float, directory: str) -> None:
        self._path, self._timeout_s, self._directory = path, timeout_s, directory
        self._fd: int | None = None
        self._slow: AbstractContextManager[int | None] | None = None

    def __enter__(self) -> None:
        try:
            self._fd = try_flock(self._path)
        except OSError:
            self._fd = None  # _held tries again and raises what it should
        if self._fd is None:
            slow = _held(self._path, self._timeout_s, directory=self._directory)
            slow.__enter__()
            self._slow = slow

    def __exit__(self, *exc: object) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
            return
        slow, self._slow = self._slow, None
        if slow is not None:
            slow.__exit__(None, None, None)


@contextlib.contextmanager
def stamped_mutex(path: str, timeout_s: float, *, directory: str) -> Iterator[int]:
    """:func:`mutex`, yielding the filesystem's time (epoch ms) once it is held.

    The mutex file's mtime is set to "now" and read back: the time of the
    machine that stamps files (this host's kernel on a local disk, the server
    on NFS), the same for every process sharing the directory whatever their
    own clocks say. Two system calls on the descriptor already open.
    """
    with _held(path, timeout_s, directory=directory) as fd:
        try:
            now = stamp_ms(path if fd is None else fd)
        except OSError as exc:
            raise os_failure("stamp the time on", path, exc, directory=directory) from None
        yield now


def stamp_ms(file: str | int) -> int:
    """Set ``file``'s (a path or a descriptor) mtime to now; that time in epoch ms."""
    os.utime(file)  # utimensat / futimens with no times: "now", as the filesystem keeps it
    return os.stat(file).st_mtime_ns // 1_000_000


class FileTimeClock:
    """A :class:`~zuke._clock.Clock` reading the filesystem's time off the file ``path``.

    For callers outside a lock operation (which stamps its mutex instead,
    :func:`stamped_mutex`); the file is created on first use.
    """

    def __init__(self, path: str, *, directory: str) -> None:
        self.path = path
        self._directory = directory

    def __repr__(self) -> str:
        return f"FileTimeClock({self.path!r})"

    def now_ms(self) -> int:
        try:
            try:
                return stamp_ms(self.path)
            except FileNotFoundError:
                ensure_directory(os.path.dirname(self.path), directory=self._directory)
                os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644))
                return stamp_ms(self.path)
        except OSError as exc:
            raise os_failure(
                "stamp the time on", self.path, exc, directory=self._directory
            ) from None


@contextlib.contextmanager
def _held(path: str, timeout_s: float, *, directory: str) -> Iterator[int | None]:
    """Hold the mutex ``path``; yields the descriptor holding it, or ``None`` (filelock's).

    Why filelock's native (``flock``) lock: the kernel drops it when the holding
    process dies, however it dies, so there is no stale marker to detect,
    stamp or steal — the original implementation's O_EXCL marker needed all
    of that. ``fallback_to_soft=False`` keeps that guarantee true: on a
    filesystem without ``flock`` we fail loudly instead of silently degrading
    to a marker file that a crash would leave behind. A fresh lock object per
    call means each thread gets its own descriptor, so threads of one process
    exclude each other exactly like separate processes do.

    The uncontended case — nearly every write — takes the same ``flock``
    directly, without filelock's bookkeeping (about 0.12 ms a call, the
    largest cost of a journal append); only a contended mutex goes through
    filelock's bounded wait. Both are ``flock`` on the same file, so they
    exclude each other.
    """
    try:
        fast = try_flock(path)
    except OSError as exc:
        if not (isinstance(exc, PermissionError) and os.path.exists(path)):
            raise os_failure("take the mutex", path, exc, directory=directory) from None
        fast = None  # a mutex file we may not write: filelock takes it read-only
    if fast is not None:
        try:
            yield fast
        finally:
            fcntl.flock(fast, fcntl.LOCK_UN)
            os.close(fast)
        return
    # Imported here: an uncontended mutex (and every listing) never needs filelock,
    # and importing it costs about 7 ms of a command's start-up.
    import filelock

    # filelock polls a contended lock; a write holds it for one fsync, so poll often.
    lock = filelock.FileLock(path, timeout=timeout_s, poll_interval=0.005, fallback_to_soft=False)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise StoreUnavailableError(
            f"state: could not take the mutex {path!r} within {timeout_s:g}s: another "
            "zuke process is holding it (a slow disk or a hung process); retry, or find "
            f"the holder with `fuser {path}`. The lock is released automatically when its "
            "process exits, so never delete the file to break it."
        ) from None
    except OSError as exc:
        raise os_failure("take the mutex", path, exc, directory=directory) from None
    try:
        yield None
    finally:
        lock.release()


@contextlib.contextmanager
def try_mutex(path: str) -> Iterator[bool]:
    """Hold the mutex ``path`` for the block if it is free right now (``True``), else ``False``.

    For work that someone else may already be doing (a listing's repair of a row
    whose writer holds the run's mutex, a rebuild another process has started).
    """
    try:
        fd = try_flock(path)
    except OSError:
        fd = None
    if fd is None:
        yield False
        return
    try:
        yield True
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def try_flock(path: str) -> int | None:
    """A descriptor holding ``flock(path)`` if it is free right now, else ``None`` (the
    caller releases it by closing it).

    Raises :class:`OSError` when the file cannot be opened for writing.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held by someone (or no flock here): the slow path decides
        os.close(fd)
        return None
    return fd


def read_small(path: str) -> bytes | None:
    """The whole of a small file, ``None`` if it does not exist.

    Plain descriptor reads: ``open()`` adds an ``fstat``, an ``ioctl`` and a
    seek that a lock operation, which reads two or three such files, does not need.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return read_to_end(fd, 4095)
    finally:
        os.close(fd)


def read_to_end(fd: int, size: int) -> bytes:
    """Everything from ``fd``'s offset on, expecting about ``size`` bytes (one read if so)."""
    parts = []
    want = size + 1
    while True:
        part = os.read(fd, want)
        parts.append(part)
        if len(part) < want:  # a regular file reads short only at its end
            return b"".join(parts)
        want = 65536


def fsync_directory(directory: str) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, directory: str) -> int:
    """Replace ``path`` with ``data``: temp file, fsync, rename, fsync the directory.

    A reader sees the old file or the new one, never a prefix; a crash at any
    point leaves at worst an orphaned ``.tmp-`` file, which no reader looks at.
    Returns the number of bytes written.
    """
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # fsync before the rename: otherwise a power cut can leave the *new*
            # name pointing at an empty or partial file.
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise os_failure("write", path, exc, directory=directory) from None
    fsync_directory(os.path.dirname(path) or ".")
    return len(data)


def append_line(
    path: str,
    line: bytes,
    *,
    truncate_to: int | None,
    directory: str,
    sync: bool,
    fd: int | None = None,
) -> int:
    """Append one complete line to ``path`` (which must exist) with a single ``write()``.

    ``truncate_to`` first cuts off a torn tail left by a crashed appender, so
    the new line starts on a line boundary. ``sync`` fsyncs the file before
    returning. ``fd``, if given, is ``path`` already open with ``O_APPEND``
    (the store's open journal, :mod:`zuke.state._fs_open`): it is written and
    left open. Returns the bytes written.
    """
    own = fd is None
    if fd is None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        except OSError as exc:
            raise os_failure("open for append", path, exc, directory=directory) from None
    try:
        if truncate_to is not None:
            os.ftruncate(fd, truncate_to)
        written = os.write(fd, line)
        if written != len(line):
            # A short write on a regular file means the disk is full; cut the
            # fragment off again so the journal keeps ending on a line boundary.
            os.ftruncate(fd, os.fstat(fd).st_size - written)
            raise OSError(errno.ENOSPC, "short write (disk full?)")
        # Once write() returns, the bytes are the kernel's: they survive the death
        # of this process however it dies. fsync additionally survives a power cut
        # or a kernel crash, at ~0.2-0.3 ms per append; the store asks for it at
        # checkpoints, or on every append with ZUKE_STATE_FSYNC=always.
        if sync:
            os.fsync(fd)
    except OSError as exc:
        raise os_failure("append to", path, exc, directory=directory) from None
    finally:
        if own:
            os.close(fd)
    return len(line)
