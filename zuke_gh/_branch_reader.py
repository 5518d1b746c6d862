"""What a process knows of the state branch (its :class:`~zuke_gh._branch_view.View`) and
how it reads more: the base of :class:`~zuke_gh.branch_store.GitHubBranchStateStore`.

* :meth:`BranchReader._first_view` — a process's first look: the head, the
  files most decisions need at that very commit, and the deletion marker, in
  one GraphQL query.
* :meth:`BranchReader._refresh` — the ref read with an ETag (a free 304 when
  nothing moved; its ``Date`` is GitHub's clock); the files again only if
  the head moved.
* :meth:`BranchReader._decide` — run a decision, reading at the view's head
  whatever it finds missing (:class:`~zuke_gh._branch_view.Missing`), then again.

A missing branch is refused as deleted when the marker tag exists or this
process saw the branch itself (:mod:`zuke_gh._branch_guard`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from zuke._clock import Clock
from zuke._errors import StoreUnavailableError
from zuke_gh import _branch_guard as guard
from zuke_gh import _branch_records as records
from zuke_gh._branch_files import LOCKS_PATH, README_PATH, README_TEXT
from zuke_gh._branch_git import BranchGit
from zuke_gh._branch_index import ACTIVE_PATH, Active, active_bytes
from zuke_gh._branch_view import Missing, View

T = TypeVar("T")

#: Reads of missing data one operation may make (a guard against a loop: listing a long
#: history reads four shards a query, 200,000 bytes each).
MAX_READS = 10_000
#: What every refresh reads along with the head: small, and what most decisions need.
_ALWAYS = (ACTIVE_PATH, LOCKS_PATH)
_INTEREST_KEPT = 4


class BranchReader:
    """The view of one branch, shared by a process's calls (one lock serialises them)."""

    def __init__(self, git: BranchGit, clock: Clock) -> None:
        self._git = git
        #: the local clock, used only when GitHub's answers carry no Date
        self.clock = clock
        self._mutex = threading.RLock()
        self._view: View | None = None
        #: whether this process has seen its branch: if it goes, it was deleted
        self._seen = False
        #: runs this process touched lately: a refresh reads their records' SHAs too
        self._interest: OrderedDict[str, None] = OrderedDict()

    def _decide(self, view: View, decide: Callable[[View], T]) -> tuple[T, View]:
        """``decide(view)``, reading at the view's head whatever it finds missing."""
        for _ in range(MAX_READS):
            try:
                return decide(view), view
            except Missing as missing:
                view = self._load(view, missing)
        raise StoreUnavailableError(f"state: {self._git.where}: too many reads for one operation")

    def _settle(self, view: View, decide: Callable[[View], T]) -> T:
        result, view = self._decide(view, decide)
        if self._view is None or self._view.head == view.head:
            self._view = view
        return result

    def _load(self, view: View, missing: Missing) -> View:
        if view.head is None:
            return view.with_files(dict.fromkeys(missing.paths))
        texts = missing.paths if missing.text else ()
        oids = () if missing.text else missing.paths
        return view.with_files(self._git.read(view.head, texts, oids))

    def _refresh(self, texts: tuple[str, ...] | list[str] = ()) -> View:
        """The branch as it is now (the ref read with an ETag; files only if it moved)."""
        head = self._git.head()
        now = head.server_ms if head.server_ms is not None else self.clock.now_ms()
        known = self._view
        if head.sha is None:
            if self._seen or self._git.marker() is not None:
                raise guard.deleted(self._git)
            view = View(head=None, server_ms=now)
        elif known is not None and known.head == head.sha:
            view = View(known.head, known.files, server_ms=now)
        else:
            oids = [p for r in self._interest for p in records.run_paths(r)]
            files = self._git.read(head.sha, [*_ALWAYS, *texts], oids)
            view = View(head.sha, files, server_ms=now)
        if view.head is not None:
            self._seen = True
        self._view = view
        return view

    def _first_view(self, *, mark: bool = True) -> View:
        """The branch as it is now, in one request (the head's files and the marker); a
        decision without the clock needs no ``Date``. ``mark``: tag a branch made before
        markers existed (a write, so not on a read)."""
        oids = [p for r in self._interest for p in records.run_paths(r)]
        first = self._git.first_view(_ALWAYS, oids)
        if first.head is None:
            if self._seen or first.marker is not None:
                raise guard.deleted(self._git)
            return View(head=None)
        if first.marker is None and mark:
            self._git.mark(first.head)  # a branch made before markers: mark it once
        self._seen = True
        view = View(first.head, first.files)
        self._view = view
        return view

    def _create_branch(self) -> None:
        # the README (GitHub refuses an empty tree) and an empty index, so the next write
        # need not look for a first-layout index.json to migrate
        files = {README_PATH: README_TEXT.encode(), ACTIVE_PATH: active_bytes(Active())}
        self._git.create_branch(files, "zuke state: branch created", force=False)
        self._seen = True

    def _note(self, run_id: str | None) -> None:
        if run_id is None:
            return
        self._interest[run_id] = None
        self._interest.move_to_end(run_id)
        while len(self._interest) > _INTEREST_KEPT:
            self._interest.popitem(last=False)
