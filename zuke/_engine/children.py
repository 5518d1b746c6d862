"""Child processes a run's bodies started, and terminating them when the run is cancelled.

The rule: when the ``zuke`` command cancels a run (Ctrl-C, SIGTERM, or
``zuke cancel`` from another process), every process descended from it that
did not exist when the run started gets SIGTERM — a body's ``subprocess``,
and what that started in turn. Processes that were already there (an
embedding program's own) are left alone, and a program that calls the
engine without signal handling (``execute()``) is never touched.

Descendants are found through ``/proc/<pid>/task/<tid>/children`` (Linux);
where that does not exist the walk finds none, and a body should stop its
own children when ``ctx.cancelled`` is set.

:func:`end_process` is the last resort of a claim that cannot be renewed
while a synchronous body runs under it (see :mod:`zuke._engine.claims`): a
thread cannot be stopped, so the process ends, with its bodies' children,
before the store can give the claim to another holder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import NoReturn

_PROC = Path("/proc")
#: The exit code of a process that ended itself because a claim could not be renewed.
EXIT_UNRENEWED = 3
#: How long children get to act on SIGTERM before SIGKILL (well inside the safety margin).
END_GRACE_S = 0.2


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = list((_PROC / str(pid) / "task").iterdir())
    except OSError:
        return found
    for task in tasks:
        try:
            text = (task / "children").read_text()
        except OSError:
            continue
        found.extend(int(p) for p in text.split())
    return found


def descendants(pid: int | None = None) -> list[int]:
    """Every live descendant of ``pid`` (this process by default), parents first."""
    out: list[int] = []
    seen: set[int] = set()
    stack = [os.getpid() if pid is None else pid]
    while stack:
        for child in _children(stack.pop()):
            if child not in seen:
                seen.add(child)
                out.append(child)
                stack.append(child)
    return out


def terminate_new(existing: frozenset[int]) -> list[int]:
    """SIGTERM every descendant not in ``existing``; the pids signalled."""
    signalled = []
    for pid in descendants():
        if pid in existing:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
            signalled.append(pid)
    return signalled


def _gone(pid: int) -> bool:
    try:
        state = (_PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def end_process(line: str, existing: frozenset[int] = frozenset()) -> NoReturn:
    """Say ``line`` on stderr, end the run's child processes, exit :data:`EXIT_UNRENEWED`.

    Children get SIGTERM, then SIGKILL after :data:`END_GRACE_S`: nothing a body
    started may outlive the claim either. ``os._exit``: no cleanup of this
    process may run (it would wait for the very threads that must stop).
    """
    with contextlib.suppress(OSError):
        os.write(2, f"zuke: {line}\n".encode(errors="replace"))
    pids = terminate_new(existing)
    deadline = time.monotonic() + END_GRACE_S
    while pids and time.monotonic() < deadline:
        pids = [pid for pid in pids if not _gone(pid)]
        time.sleep(0.01)  # a poll with a deadline: the children's own pace
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    os._exit(EXIT_UNRENEWED)
