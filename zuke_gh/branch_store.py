"""``GitHubBranchStateStore``: zuke's run records and locks as files on a git branch.

Selected with ``ZUKE_STATE=github://OWNER/REPO?branch=zuke-state`` (the
``zuke.state_stores`` entry point :func:`from_url`), or returned from a build's
``state_store()``. ``docs/github-state.md`` is the design; in short:

* **Layout.** ``runs/<id>.json``, ``index.json`` (what a listing needs),
  ``locks.json`` (claims, fences, the fence floor) on an orphan branch made
  on first write.
* **Compare-and-swap.** Every write is one ``createCommitOnBranch`` whose
  ``expectedHeadOid`` is the head the decision was taken on. A head moved by
  another file is re-read and the write re-decided, transparently; a record
  whose blob SHA (its version) is no longer the expected one is a
  ``Conflict``. Bounded attempts, with jitter.
* **Locks** are judged by GitHub's clock: the ``Date`` of the answer that read
  the head (:mod:`zuke_gh._branch_locks`).
* **Cost.** The store keeps its view of the branch, advanced by its own
  commits, so an uncontended write is one request (two for a process's first
  write: the head and its tree in one query, then the commit); reads are conditional
  (ETags, a 304 is free): ``get_run`` reads the ref, a listing reads
  ``index.json`` through the contents API.
* **Write budget.** ``checkpointed = True`` (the engine writes at durability
  points only) and a 10-minute default run lease (renewed every 5 minutes:
  12 commits an hour per running release instead of 120).

One lock serialises a process's calls to the store (the view is shared).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final, TypeVar
from urllib.parse import parse_qs, urlsplit

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import StateError, StoreUnavailableError
from zuke.state._ids import check_id, check_ttl
from zuke.state._protocol import (
    RUN_LEASE_PREFIX,
    Conflict,
    LockAcquired,
    LockEntry,
    LockHeld,
    LockHolder,
    RunQuery,
    StoredRun,
    Written,
)
from zuke.state._query import select
from zuke.state.records import RunRecord, RunSummary
from zuke_gh import _branch_locks as locks
from zuke_gh._branch_files import (
    INDEX_PATH,
    LOCKS_PATH,
    blob_sha,
    entry_record,
    index_bytes,
    index_entry,
    locks_bytes,
    parse_index,
    parse_locks,
    parse_record_file,
    record_bytes,
    run_path,
)
from zuke_gh._branch_git import BranchGit
from zuke_gh._branch_view import Step, View, after
from zuke_gh._paths import ref_name_problem, repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

T = TypeVar("T")

DEFAULT_BRANCH = "zuke-state"
#: This store's run lease: 10 minutes, renewed every 5 (12 commits an hour per running run).
DEFAULT_LEASE_TTL_MS = 600_000
#: Commit attempts of one operation under contention, and the first pause between them.
MAX_ATTEMPTS = 16
FIRST_PAUSE_S = 0.02
MAX_PAUSE_S = 1.0
_TEXTS_KEPT = 64
_EVERY_RUN: Final = RunQuery()


class GitHubBranchStateStore:
    """A :class:`~zuke.state.StateStore` on the branch ``branch`` of ``owner/repo``."""

    #: every write is a commit: the engine writes at durability points only
    checkpointed: Final = True
    #: the run lease's TTL when ``ZUKE_RUN_LEASE_TTL`` is unset (see docs/github-state.md)
    default_lease_ttl_ms: Final = DEFAULT_LEASE_TTL_MS

    def __init__(
        self,
        client: GitHubClient,
        repository: str,
        *,
        branch: str = DEFAULT_BRANCH,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        owner, repo = repo_slug(repository)
        problem = ref_name_problem(branch)
        if problem is not None:
            raise StateError(f"state: branch {branch!r} is not a git branch name: {problem}")
        self._git = BranchGit(client, owner, repo, branch)
        self.client = client
        self.repository, self.branch = f"{owner}/{repo}", branch
        #: the local clock, used only when GitHub's answers carry no Date
        self.clock = clock
        self._sleep, self._rand = sleep, rand
        self._mutex = threading.RLock()
        self._view: View | None = None
        self._texts: OrderedDict[str, str] = OrderedDict()  # blob SHA -> record text

    def __repr__(self) -> str:
        return self._git.where

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> GitHubBranchStateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- runs --------------------------------------------------------------------------------

    def get_run(self, run_id: str) -> StoredRun | None:
        check_id(run_id)
        with self._mutex:
            view = self._refresh(run_id)
            oid = view.runs.get(run_id)
            if oid is None:
                return None
            text = self._texts.get(oid)
            if text is None:
                assert view.head is not None
                found = self._git.snapshot(view.head, run_id).run
                if found is None:
                    return None
                oid, text = found
                self._keep(oid, text)
        return StoredRun(record=parse_record_file(text, run_id), version=oid)

    def create_run(self, record: RunRecord) -> Written | Conflict:
        check_id(record.id)
        data = record_bytes(record)

        def decide(view: View) -> Step[Written | Conflict]:
            if record.id in view.runs:
                return Step(Conflict())
            return self._record_step(view, record, data, f"run {record.id}: created")

        return self._transact(decide, keep=(blob_sha(data), data))

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        check_id(record.id)
        data = record_bytes(record)

        def decide(view: View) -> Step[Written | Conflict]:
            if view.runs.get(record.id) != expected_version:
                return Step(Conflict())
            before = view.index.get(record.id, {}).get("status")
            what = record.status if before != record.status else f"updated ({record.status})"
            return self._record_step(view, record, data, f"run {record.id}: {what}")

        return self._transact(decide, keep=(blob_sha(data), data))

    def delete_run(self, run_id: str) -> None:
        check_id(run_id)

        def decide(view: View) -> Step[None]:
            additions: dict[str, bytes] = {}
            deletions: tuple[str, ...] = ()
            if run_id in view.runs:
                deletions = (run_path(run_id),)
            if run_id in view.index:
                rest = {k: v for k, v in view.index.items() if k != run_id}
                additions[INDEX_PATH] = index_bytes(rest)
            # nobody takes a deleted run's lease again: forget it unless it is live
            forgotten = locks.forget(view.locks, RUN_LEASE_PREFIX + run_id, view.clock_ms())
            if forgotten is not None:
                additions[LOCKS_PATH] = locks_bytes(forgotten)

            def landed(fresh: View) -> bool:
                return run_id not in fresh.runs

            return Step(None, additions, deletions, f"run {run_id}: deleted", landed)

        self._transact(decide, needs_clock=True)

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        with self._mutex:
            found = self._git.read_file(INDEX_PATH)
        entries = parse_index(found[1] if found else None)
        return select((entry_record(i, e) for i, e in entries.items()), query)

    # -- locks -------------------------------------------------------------------------------

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        token = uuid.uuid4().hex
        return self._transact(
            lambda view: locks.acquire(view, key, holder, ttl_ms, token), needs_clock=True
        )

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        return self._transact(lambda view: locks.renew(view, key, token, ttl_ms), needs_clock=True)

    def release_lock(self, key: str, token: str) -> None:
        check_id(key, "lock key")
        self._transact(lambda view: locks.release(view, key, token))

    def break_lock(self, key: str) -> LockHolder | None:
        check_id(key, "lock key")
        return self._transact(lambda view: locks.break_claim(view, key))

    def list_locks(self, *, run_id: str | None = None) -> list[LockEntry]:
        with self._mutex:
            found = self._git.read_file(LOCKS_PATH)
        claims = parse_locks(found[1] if found else None).claims
        return [
            LockEntry(key=key, holder=state.holder, expires_at=state.expires_at, fence=state.fence)
            for key, state in sorted(claims.items())
            if state.holder is not None
            and state.expires_at is not None
            and (run_id is None or state.holder.run_id == run_id)
        ]

    # -- the compare-and-swap loop -----------------------------------------------------------

    def _transact(
        self,
        decide: Callable[[View], Step[T]],
        *,
        needs_clock: bool = False,
        keep: tuple[str, bytes] | None = None,
    ) -> T:
        """Decide on the branch as known, commit on that head; re-read and re-decide if it moved.

        A decision that writes nothing (a conflict, a held lock) is final only
        on a head read in this call; one taken on the remembered view is taken
        again on a fresh one. ``keep`` is a record's (SHA, bytes), cached once
        it landed so the next read of it costs nothing more.
        """
        with self._mutex:
            view, fresh = self._view, False
            if view is None and not needs_clock:
                view, fresh = self._first_view(), True
            elif view is None or needs_clock:
                view, fresh = self._refresh(), True
            for attempt in range(MAX_ATTEMPTS):
                step = decide(view)
                if not step.writes:
                    if fresh:
                        return step.result
                    view, fresh = self._refresh(), True
                    continue
                if view.head is None:
                    self._git.create_branch()
                    view, fresh = self._refresh(), True
                    continue
                head = self._git.commit(
                    view.head, dict(step.additions), list(step.deletions), step.message
                )
                if head is not None:
                    self._view = after(view, step, head)
                    if keep is not None:
                        self._keep(keep[0], keep[1].decode())
                    return step.result
                self._pause(attempt)
                view, fresh = self._refresh(), True
                if step.landed is not None and step.landed(view):
                    return step.result  # our commit landed; its answer was lost and resent
            raise StoreUnavailableError(
                f"state: {self._git.where}: the branch kept moving under {MAX_ATTEMPTS} attempts "
                "to write it (heavy contention); try again"
            )

    def _record_step(
        self, view: View, record: RunRecord, data: bytes, message: str
    ) -> Step[Written | Conflict]:
        index = dict(view.index)
        index[record.id] = index_entry(record)
        oid = blob_sha(data)
        return Step(
            Written(version=oid),
            {run_path(record.id): data, INDEX_PATH: index_bytes(index)},
            message=message,
            landed=lambda fresh: fresh.runs.get(record.id) == oid,
        )

    def _refresh(self, run_id: str | None = None) -> View:
        """The branch as it is now (the ref read with an ETag; the tree only if it moved)."""
        head = self._git.head()
        now = head.server_ms if head.server_ms is not None else self.clock.now_ms()
        known = self._view
        if head.sha is None:
            view = View(head=None, server_ms=now)
        elif known is not None and known.head == head.sha and self._has_text(known, run_id):
            view = View(known.head, known.runs, known.index, known.locks, server_ms=now)
        else:
            tree = self._git.snapshot(head.sha, run_id)
            if tree.run is not None:
                self._keep(*tree.run)
            view = View(
                head=head.sha,
                runs=tree.runs,
                index=parse_index(tree.index),
                locks=parse_locks(tree.locks),
                server_ms=now,
            )
        self._view = view
        return view

    def _first_view(self) -> View:
        """The branch as it is now, in one request: a first write's decision needs no
        clock, so the head's ``Date`` (lock expiry) is not read."""
        head, tree = self._git.head_and_tree()
        if head is None or tree is None:
            view = View(head=None)
        else:
            view = View(head, tree.runs, parse_index(tree.index), parse_locks(tree.locks))
        self._view = view
        return view

    def _has_text(self, view: View, run_id: str | None) -> bool:
        return run_id is None or run_id not in view.runs or view.runs[run_id] in self._texts

    def _keep(self, oid: str, text: str) -> None:
        self._texts[oid] = text
        self._texts.move_to_end(oid)
        while len(self._texts) > _TEXTS_KEPT:
            self._texts.popitem(last=False)

    def _pause(self, attempt: int) -> None:
        delay = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2**attempt)
        self._sleep(delay * (0.5 + self._rand()))


def from_url(spec: str, env: Mapping[str, str]) -> GitHubBranchStateStore:
    """The store ``ZUKE_STATE=github://OWNER/REPO?branch=NAME`` names (the entry point)."""
    parts = urlsplit(spec)
    repository = f"{parts.netloc}{parts.path.rstrip('/')}"
    query = parse_qs(parts.query)
    unknown = sorted(set(query) - {"branch"})
    if parts.scheme != "github" or unknown or parts.fragment:
        raise StateError(
            f"ZUKE_STATE={spec!r}: expected github://OWNER/REPO?branch=NAME "
            "(the only option is branch)"
        )
    branch = query.get("branch", [DEFAULT_BRANCH])[-1]
    try:
        repo_slug(repository)
        client = GitHubClient.from_env(env)
    except GitHubError as exc:
        raise StateError(f"ZUKE_STATE={spec!r}: {exc}") from None
    return GitHubBranchStateStore(client, repository, branch=branch)


__all__ = ["DEFAULT_BRANCH", "DEFAULT_LEASE_TTL_MS", "GitHubBranchStateStore", "from_url"]
