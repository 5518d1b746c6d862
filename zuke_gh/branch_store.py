"""``GitHubBranchStateStore``: zuke's run records and locks as files on a git branch.

Selected with ``ZUKE_STATE=github://OWNER/REPO?branch=zuke-state`` (the
``zuke.state_stores`` entry point :func:`from_url`), or returned from a build's
``state_store()``. ``docs/github-state.md`` is the design; in short:

* **Layout.** ``README.md``, ``active.json`` (the runs not finished),
  ``index/<n>.json`` (finished runs, in capped shards), ``locks.json`` and
  ``runs/<hh>/<id>.json`` on an orphan branch made on first write
  (:mod:`zuke_gh._branch_files`, :mod:`zuke_gh._branch_index`). No file grows with
  the runs ever made, so none reaches GraphQL's 512,000-byte ``Blob.text`` cut;
  a text that is cut anyway is read whole by its blob SHA.
* **Compare-and-swap.** Every write is one ``createCommitOnBranch`` whose
  ``expectedHeadOid`` is the head the decision was taken on. A head moved by
  another file is re-read and the write re-decided, transparently; a record
  whose blob SHA (its version) is no longer the expected one is a
  ``Conflict``. A lost answer is decided by a witness later writes cannot
  erase, the write id each commit carries (:mod:`zuke_gh._branch_writer`).
* **Reads by path.** The store's view holds only the files its decisions
  touched at one head; a record is looked up by its path at that head. The
  records of the runs not finished a listing answered are read together, in
  batches, when the first of them is needed (a sweep's cost does not grow with
  the runs waiting), and texts are kept by blob SHA across heads.
* **A deleted branch is never re-created over lost state**: a marker tag made
  with the branch tells "deleted" from "never made" (:meth:`initialize` starts
  afresh deliberately, with fences above every earlier one).
* **Locks** are judged by GitHub's clock: the ``Date`` of the answer that read
  the head (:mod:`zuke_gh._branch_locks`).
* **Write budget.** ``checkpointed = True`` (the engine writes at durability
  points only) and a 10-minute default run lease.

One lock serialises a process's calls to the store (the view is shared).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Final, TypeVar
from urllib.parse import parse_qs, urlsplit

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import StateError
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
from zuke.state.records import RunRecord, RunSummary
from zuke_gh import _branch_guard as guard
from zuke_gh import _branch_locks as locks
from zuke_gh import _branch_records as records
from zuke_gh._branch_files import (
    LOCKS_PATH,
    locks_bytes,
    parse_record_file,
    record_bytes,
)
from zuke_gh._branch_git import BranchGit
from zuke_gh._branch_index import (
    list_entries,
    place,
)
from zuke_gh._branch_view import Step, View
from zuke_gh._branch_writer import BranchWriter
from zuke_gh._pacing import BranchBudget
from zuke_gh._paths import ref_name_problem, repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

T = TypeVar("T")

DEFAULT_BRANCH = "zuke-state"
#: This store's run lease: 10 minutes, renewed every 5 (12 commits an hour per running run).
DEFAULT_LEASE_TTL_MS = 600_000
_EVERY_RUN: Final = RunQuery()


class GitHubBranchStateStore(BranchWriter):
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
        super().__init__(BranchGit(client, owner, repo, branch), clock, sleep=sleep, rand=rand)
        self.client = client
        self.repository, self.branch = f"{owner}/{repo}", branch
        self._budget = BranchBudget(client, owner, repo, branch)

    def __repr__(self) -> str:
        return self._git.where

    @property
    def display_name(self) -> str:
        """``github://OWNER/REPO@BRANCH``: the store as messages name it."""
        return f"github://{self.repository}@{self.branch}"

    def reserve_writes(self, writes: int) -> bool:
        """Whether ``writes`` more commits fit the write budget now: a sweep asks before a
        resume and defers what does not fit (``zuke_gh._pacing.BranchBudget``)."""
        with self._mutex:
            return self._budget.reserve(writes)

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
            self._note(run_id)
            view = self._refresh(texts=records.run_paths(run_id))
            found = self._settle(view, lambda v: records.find_record(v, run_id, text=True))
        if found is None:
            return None
        path, blob = found
        assert blob.text is not None
        return StoredRun(record=parse_record_file(blob.text, run_id, path), version=blob.oid)

    def create_run(self, record: RunRecord) -> Written | Conflict:
        check_id(record.id)
        data = record_bytes(record)

        def decide(view: View) -> Step[Written | Conflict]:
            if records.find_record(view, record.id, text=False) is not None:
                return Step(Conflict())
            return records.record_step(view, record, data, f"run {record.id}: created")

        return self._transact(decide, run_id=record.id, same=(record.id, "", record))

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        check_id(record.id)
        data = record_bytes(record)

        def decide(view: View) -> Step[Written | Conflict]:
            found = records.find_record(view, record.id, text=False)
            if found is None or found[1].oid != expected_version:
                return Step(Conflict())
            layout = records.index_at(view)[0]
            before = layout.runs.get(record.id, {}).get("status")
            what = record.status if before != record.status else f"updated ({record.status})"
            return records.record_step(view, record, data, f"run {record.id}: {what}")

        return self._transact(decide, run_id=record.id, same=(record.id, expected_version, record))

    def delete_run(self, run_id: str) -> None:
        check_id(run_id)

        def decide(view: View) -> Step[None]:
            layout, files, deletions = records.index_at(view)
            found = records.find_record(view, run_id, text=False)
            shard = None
            if found is not None and run_id not in layout.runs:
                shard = records.find_shard(view, layout, files, run_id)
            index = place(layout, records.shards(view, files), run_id, shard, None)
            # nobody takes a deleted run's lease again: forget it unless it is live
            forgotten = locks.forget(view.locks, RUN_LEASE_PREFIX + run_id, view.clock_ms())
            if found is None and not index and forgotten is None:
                return Step(None)
            additions = {**files, **index}
            if forgotten is not None:
                additions[LOCKS_PATH] = locks_bytes(forgotten)
            if found is not None:
                deletions = (*deletions, found[0])
            return Step(None, additions, deletions, f"run {run_id}: deleted")

        self._transact(decide, needs_clock=True, run_id=run_id)

    def list_runs(self, query: RunQuery = _EVERY_RUN) -> list[RunSummary]:
        with self._mutex:
            # with a view, the ref read is conditional (a free 304 when nothing moved)
            view = self._refresh() if self._view is not None else self._first_view(mark=False)
            if view.head is None:
                return []

            def listing(v: View) -> tuple[list[RunSummary], list[str]]:
                layout, files, _ = records.index_at(v, readme=False)
                found = list_entries(layout, records.shards(v, files, batch=4), query)
                return found, [s.id for s in found if s.id in layout.runs]

            found, active = self._settle(view, listing)
            self._list_active(active)  # a sweep reads them next: prefetched together
            return found

    # -- locks -------------------------------------------------------------------------------

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        check_id(key, "lock key")
        check_ttl(ttl_ms)
        token = uuid.uuid4().hex
        return self._transact(
            lambda view: locks.acquire(view, key, holder, ttl_ms, token),
            needs_clock=True,
            run_id=_lease_run(key),
            same=(key, "", (holder, ttl_ms)),
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
            view = self._refresh()
            claims = self._settle(view, lambda v: v.locks).claims
        return [
            LockEntry(key=key, holder=state.holder, expires_at=state.expires_at, fence=state.fence)
            for key, state in sorted(claims.items())
            if state.holder is not None
            and state.expires_at is not None
            and (run_id is None or state.holder.run_id == run_id)
        ]

    # -- the branch itself -------------------------------------------------------------------

    def initialize(self, *, force: bool = False) -> str:
        """Create the state branch now (``zuke state init``); what happened, in a few words.
        ``force`` starts afresh over a deleted branch (:func:`zuke_gh._branch_guard.initialize`)."""
        with self._mutex:
            done = guard.initialize(self._git, self.clock, force=force)
            self._view, self._seen = None, True
            return done


def _lease_run(key: str) -> str | None:
    return key[len(RUN_LEASE_PREFIX) :] if key.startswith(RUN_LEASE_PREFIX) else None


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
