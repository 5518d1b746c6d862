"""The branch at one head (:class:`View`) and a decision taken on it (:class:`Step`).

A :class:`View` is what the store knows of the branch at one head commit: the
files it has read or written there (a path's blob SHA, and its text when it
was read), and — when the head was read in this call — GitHub's clock at that
read. It never lists every run: a decision asks for the paths it needs
(:meth:`View.oid`, :meth:`View.text`), and a path not yet known raises
:class:`Missing`, which the store answers by reading exactly those paths at
that head and deciding again. So the cost of a decision grows with what it
touches, not with the runs ever made.

A :class:`Step` is an operation's answer plus the file changes that must land
on exactly that head for the answer to hold. :func:`after` is the view once
those changes landed as a new commit, so a process that writes keeps an
up-to-date view without reading the branch back (its next write costs one
request).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Generic, TypeVar

from zuke_gh._branch_files import LOCKS_PATH, LockFile, blob_sha, parse_locks

T = TypeVar("T")

#: parsed once per text (a view keeps the same ``str`` objects, whose hash Python caches)
_parse_locks = lru_cache(maxsize=16)(parse_locks)


@dataclass(frozen=True)
class Blob:
    """A file at the view's head: its blob SHA, and its text once read (``None``: not read)."""

    oid: str
    text: str | None = None


class Missing(Exception):
    """A decision needs ``paths`` (their text, or only their blob SHA) at the view's head."""

    def __init__(self, paths: Iterable[str], *, text: bool) -> None:
        self.paths = tuple(dict.fromkeys(paths))
        self.text = text
        super().__init__(f"need {', '.join(self.paths)}")


@dataclass(frozen=True)
class View:
    head: str | None  #: ``None``: the branch does not exist
    #: path -> what is there at ``head`` (``None``: no such file); absent: not known
    files: Mapping[str, Blob | None] = field(default_factory=dict)
    #: GitHub's clock (epoch ms) when this head was read in the current call, else None
    server_ms: int | None = None

    def clock_ms(self) -> int:
        assert self.server_ms is not None, "a lock decision needs GitHub's clock"
        return self.server_ms

    def oid(self, path: str) -> str | None:
        """The blob SHA at ``path`` (``None``: no such file); :class:`Missing` if unknown."""
        if path not in self.files:
            raise Missing((path,), text=False)
        found = self.files[path]
        return None if found is None else found.oid

    def text(self, path: str) -> str | None:
        """The text at ``path`` (``None``: no such file); :class:`Missing` if not read."""
        self.need((path,))
        found = self.files[path]
        return None if found is None else found.text

    def need(self, paths: Iterable[str], *, text: bool = True) -> None:
        """Raise :class:`Missing` for every path of ``paths`` not known (read, for ``text``)."""
        wanted = [p for p in paths if not self.knows(p, text=text)]
        if wanted:
            raise Missing(wanted, text=text)

    def knows(self, path: str, *, text: bool) -> bool:
        if path not in self.files:
            return False
        found = self.files[path]
        return found is None or not text or found.text is not None

    def with_files(self, more: Mapping[str, Blob | None]) -> View:
        return View(self.head, {**self.files, **more}, self.server_ms)

    @property
    def locks(self) -> LockFile:
        return _parse_locks(self.text(LOCKS_PATH))


@dataclass(frozen=True)
class Step(Generic[T]):
    """An answer, and what to commit on the view's head for it to hold (nothing: no write)."""

    result: T
    additions: Mapping[str, bytes] = field(default_factory=dict)
    deletions: tuple[str, ...] = ()
    message: str = ""

    @property
    def writes(self) -> bool:
        return bool(self.additions or self.deletions)


def after(view: View, step: Step[Any], head: str) -> View:
    """``view`` once ``step`` landed as commit ``head`` (every other path is unchanged)."""
    files: dict[str, Blob | None] = dict(view.files)
    for path in step.deletions:
        files[path] = None
    for path, data in step.additions.items():
        files[path] = Blob(blob_sha(data), data.decode())
    return View(head=head, files=files)
