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
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

_PROC = Path("/proc")


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
