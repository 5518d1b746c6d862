"""The branch at one head (:class:`View`) and a decision taken on it (:class:`Step`).

A :class:`View` is what the store knows of the branch: the head commit, each
run file's blob SHA, the parsed index and locks, and — when the head was read
in this call — GitHub's clock at that read. A :class:`Step` is an operation's
answer plus the file changes that must land on exactly that head for the
answer to hold. :func:`after` is the view once those changes landed as a new
commit, so a process that writes keeps an up-to-date view without reading the
branch back (its next write costs one request).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from zuke_gh._branch_files import (
    INDEX_PATH,
    LOCKS_PATH,
    RUNS_DIR,
    LockFile,
    blob_sha,
    parse_index,
    parse_locks,
)

T = TypeVar("T")


@dataclass(frozen=True)
class View:
    head: str | None  #: ``None``: the branch does not exist yet
    runs: Mapping[str, str] = field(default_factory=dict)  #: run id -> blob SHA
    index: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    locks: LockFile = field(default_factory=LockFile)
    #: GitHub's clock (epoch ms) when this head was read in the current call, else None
    server_ms: int | None = None

    def clock_ms(self) -> int:
        assert self.server_ms is not None, "a lock decision needs GitHub's clock"
        return self.server_ms


@dataclass(frozen=True)
class Step(Generic[T]):
    """An answer, and what to commit on the view's head for it to hold (nothing: no write)."""

    result: T
    additions: Mapping[str, bytes] = field(default_factory=dict)
    deletions: tuple[str, ...] = ()
    message: str = ""
    #: whether a view shows this step's commit already landed (a resent commit's lost answer)
    landed: Callable[[View], bool] | None = None

    @property
    def writes(self) -> bool:
        return bool(self.additions or self.deletions)


def after(view: View, step: Step[Any], head: str) -> View:
    """``view`` once ``step`` landed as commit ``head``."""
    runs = dict(view.runs)
    prefix = RUNS_DIR + "/"
    for path in step.deletions:
        if path.startswith(prefix):
            runs.pop(path[len(prefix) : -len(".json")], None)
    for path, data in step.additions.items():
        if path.startswith(prefix):
            runs[path[len(prefix) : -len(".json")]] = blob_sha(data)
    index = view.index
    if INDEX_PATH in step.additions:
        index = parse_index(step.additions[INDEX_PATH].decode())
    locks = view.locks
    if LOCKS_PATH in step.additions:
        locks = parse_locks(step.additions[LOCKS_PATH].decode())
    return View(head=head, runs=runs, index=index, locks=locks)
