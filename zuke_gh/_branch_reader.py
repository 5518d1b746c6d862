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
* **Prefetch.** A listing notes the runs not finished it answered (a sweep's);
  the first record of them a later call needs at a head is read with all the
  others not read there yet, in batched queries (their SHAs and sizes, then
  their texts, fifty and a megabyte an answer at most), so a sweep over 100
  waiting runs costs a handful of GraphQL points, not one per run. Texts are
  kept by blob SHA (:mod:`zuke_gh._branch_texts`): after the head moved, a
  record whose SHA did not change is not read again, and one whose SHA did is
  never answered from the cache. Every file of a view is at the view's head.

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
from zuke_gh._branch_texts import TextCache
from zuke_gh._branch_view import Blob, Missing, View

T = TypeVar("T")

#: Reads of missing data one operation may make (a guard against a loop: listing a long
#: history reads four shards a query, 200,000 bytes each).
MAX_READS = 10_000
#: What every refresh reads along with the head: small, and what most decisions need.
_ALWAYS = (ACTIVE_PATH, LOCKS_PATH)
_INTEREST_KEPT = 4
#: The listed runs a prefetch reads at most (a sweep's waiting runs).
PREFETCH_RUNS = 1_000
#: Per query: paths whose SHA and size are asked; texts read; their bytes (answers bounded).
SIZES_PER_QUERY = 100
TEXTS_PER_QUERY = 50
ANSWER_BYTES = 1_000_000
#: A record larger than this is not prefetched: it is read alone, when it is needed.
PREFETCH_MAX_BYTES = 200_000
#: What one prefetch reads at most (the rest waits for the next): memory stays bounded.
PREFETCH_TOTAL_BYTES = 16_000_000
#: So few records are read with their texts at once: no answer passes 4 x 512,000 bytes.
DIRECT_TEXTS = 4
_CUT_KEPT = 1_000


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
        #: the runs not finished the last listing answered: read together when one is needed
        self._listed: dict[str, None] = {}
        #: texts by blob SHA, and the SHAs whose text GraphQL cuts (read by the blobs API)
        self._texts = TextCache()
        self._cut: OrderedDict[str, None] = OrderedDict()

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
        head = view.head
        if not missing.text:
            return view.with_files(self._read(head, (), missing.paths))
        known: dict[str, Blob | None] = {}
        for path in missing.paths:  # a SHA known at this head: kept, or cut (read whole)
            blob = view.files.get(path)
            if blob is not None and (blob.oid in self._cut or self._texts.get(blob.oid)):
                known[path] = Blob(blob.oid, self._whole(blob.oid, path))
        view = view.with_files(known)
        wanted = [p for p in missing.paths if not view.knows(p, text=True)]
        if not wanted:
            return view
        listed = set(self._listed_paths(view))
        if any(p in listed for p in wanted):
            return self._prefetch(view, wanted)
        return view.with_files(self._read(head, wanted, ()))

    def _listed_paths(self, view: View | None) -> list[str]:
        """The records of the listed runs (their old paths too on a migrated branch)."""
        return [p for r in self._listed for p in records.run_paths(r, view)]

    def _prefetch(self, view: View, wanted: list[str]) -> View:
        """``wanted`` (texts) with every listed record not read at the view's head: their
        SHAs and sizes, then the texts not kept, in batches that bound each answer."""
        head = view.head
        assert head is not None
        others = [p for p in self._listed_paths(view) if p not in wanted
                  and not view.knows(p, text=True) and not self._is_cut(view, p)]  # fmt: skip
        asked = [*wanted, *others]
        if len(asked) <= DIRECT_TEXTS:  # a few: their texts at once (one query, not two)
            return view.with_files(self._wholly(self._read(head, asked, (), whole=False), wanted))
        sized: dict[str, tuple[str, int] | None] = {}
        for start in range(0, len(asked), SIZES_PER_QUERY):
            sized.update(self._git.sizes(head, asked[start : start + SIZES_PER_QUERY]))
        files: dict[str, Blob | None] = {}
        fetch: list[tuple[str, int]] = []
        total = 0
        for path, found in sized.items():
            if found is None:
                files[path] = None
                continue
            oid, size = found
            text = self._texts.get(oid)
            files[path] = Blob(oid, text)
            small = text is None and oid not in self._cut and size <= PREFETCH_MAX_BYTES
            if small and (path in wanted or total + size <= PREFETCH_TOTAL_BYTES):
                fetch.append((path, size))
                total += size
        for batch in _batches(fetch):
            files.update(self._read(head, batch, (), whole=False))
        return view.with_files(self._wholly(files, wanted))

    def _wholly(self, files: dict[str, Blob | None], wanted: list[str]) -> dict[str, Blob | None]:
        """``files`` with each of ``wanted`` read whole by its SHA if it lacks its text (cut,
        or too large to prefetch)."""
        for path in wanted:
            blob = files.get(path)
            if blob is not None and blob.text is None:
                files[path] = Blob(blob.oid, self._whole(blob.oid, path))
        return files

    def _is_cut(self, view: View, path: str) -> bool:
        blob = view.files.get(path)
        return blob is not None and blob.oid in self._cut

    def _read(
        self, head: str, texts: list[str] | tuple[str, ...], oids: list[str] | tuple[str, ...],
        *, whole: bool = True,
    ) -> dict[str, Blob | None]:  # fmt: skip
        """Files at ``head`` (one query), texts kept by SHA; a cut text read whole by its
        SHA (``whole``) or left unread; an SHA already kept comes with its text."""
        return self._complete(self._git.read(head, texts, oids), texts, whole=whole)

    def _complete(
        self, found: dict[str, Blob | None], texts: list[str] | tuple[str, ...], *,
        whole: bool = True,
    ) -> dict[str, Blob | None]:  # fmt: skip
        for path, blob in found.items():
            if blob is None:
                continue
            if blob.text is not None:
                self._texts.put(blob.oid, blob.text)
            elif path in texts:  # GraphQL cut it (isTruncated)
                self._note_cut(blob.oid)
                if whole:
                    found[path] = Blob(blob.oid, self._whole(blob.oid, path))
            else:
                kept = self._texts.get(blob.oid)
                if kept is not None:
                    found[path] = Blob(blob.oid, kept)
        return found

    def _whole(self, oid: str, path: str) -> str:
        """Blob ``oid``'s whole text: kept, else the blobs API (no cut below 100 MB)."""
        text = self._texts.get(oid)
        if text is None:
            text = self._git.blob_text(oid, path)
            self._texts.put(oid, text)
        return text

    def _note_cut(self, oid: str) -> None:
        self._cut[oid] = None
        while len(self._cut) > _CUT_KEPT:
            self._cut.popitem(last=False)

    def _list_active(self, run_ids: list[str]) -> None:
        """Note the runs not finished a listing answered: they are prefetched together."""
        self._listed = dict.fromkeys(run_ids[:PREFETCH_RUNS])

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
            # the SHAs of the runs touched lately and of the listed ones: a record whose
            # SHA did not change is served from the texts kept, with no query more
            interest = [p for r in self._interest for p in records.run_paths(r)]
            oids = list(dict.fromkeys([*interest, *self._listed_paths(known)[:SIZES_PER_QUERY]]))
            files = self._read(head.sha, [*_ALWAYS, *texts], oids)
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
        view = View(first.head, self._complete(first.files, _ALWAYS))
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


def _batches(fetch: list[tuple[str, int]]) -> list[list[str]]:
    """``fetch`` (path, size) in reads of at most ``TEXTS_PER_QUERY`` paths and
    ``ANSWER_BYTES`` bytes (one larger record alone)."""
    out: list[list[str]] = []
    size = 0
    for path, bytes_ in fetch:
        if not out or len(out[-1]) >= TEXTS_PER_QUERY or size + bytes_ > ANSWER_BYTES:
            out.append([])
            size = 0
        out[-1].append(path)
        size += bytes_
    return out
