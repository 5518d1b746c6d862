"""The branch store's compare-and-swap loop: decide on a head, commit on it, and decide a lost
answer by its witness (:class:`BranchWriter`, the base of
:class:`~zuke_gh.branch_store.GitHubBranchStateStore`).

* Every write is one ``createCommitOnBranch`` whose ``expectedHeadOid`` is the
  head the decision was taken on. A head moved by another file is re-read and
  the write re-decided, transparently; bounded attempts (:data:`MAX_ATTEMPTS`),
  with jitter.
* **A lost answer** is decided by a witness later writes cannot erase: each
  commit carries a write id in its message, and the branch's history says
  whether the commit after the head it expected is ours
  (:mod:`zuke_gh._branch_witness`) — ``Written`` or ``LockAcquired`` then,
  whatever landed after it. A write whose look failed too fails unsure
  (:class:`~zuke.state._unsure.UnsureWriteError`) and is remembered: the same
  write sent again (the run's writer retries the same change against the same
  version) looks first, so it is never applied twice nor taken for another
  process's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from zuke._clock import Clock
from zuke._errors import StoreRefusedError, StoreUnavailableError
from zuke.state._unsure import UnsureWriteError, UnsureWrites
from zuke_gh import _branch_records as records
from zuke_gh._branch_git import BranchGit
from zuke_gh._branch_index import ACTIVE_PATH
from zuke_gh._branch_reader import BranchReader
from zuke_gh._branch_view import Step, View, after
from zuke_gh._branch_witness import LostAnswer, Sent, Unsure, landed, new_id, trailer

T = TypeVar("T")

#: Commit attempts of one operation under contention, and the first pause between them.
MAX_ATTEMPTS = 16
FIRST_PAUSE_S = 0.02
MAX_PAUSE_S = 1.0
#: what names one write across calls: (run id or lock key, expected version, payload)
Same = tuple[str, str, object]


class BranchWriter(BranchReader):
    """:class:`BranchReader` and the loop that writes the branch."""

    def __init__(
        self,
        git: BranchGit,
        clock: Clock,
        *,
        sleep: Callable[[float], None],
        rand: Callable[[], float],
    ) -> None:
        super().__init__(git, clock)
        self._sleep, self._rand = sleep, rand
        #: writes whose answer was lost and could not be looked up: looked up if sent again
        self._unsure: UnsureWrites[tuple[Sent[Any], ...]] = UnsureWrites()

    def _transact(
        self, decide: Callable[[View], Step[T]], *, needs_clock: bool = False,
        run_id: str | None = None, same: Same | None = None,
    ) -> T:  # fmt: skip
        """Decide on the branch as known, commit on that head; re-read and re-decide if it moved.

        A decision that writes nothing (a conflict, a held lock) is final only
        on a head read in this call; one taken on the remembered view is taken
        again on a fresh one. Data a decision lacks is read at the same head.
        ``same`` names the write across calls: if an earlier call of it failed
        unsure, whether it landed is looked up before anything is decided.
        """
        with self._mutex:
            if run_id is not None:
                self._note(run_id)
            earlier = self._unsure.key(*same) if same is not None else None
            pending: list[Sent[T]] = []
            if same is not None and earlier is not None:
                view = self._refresh()
                found = self._landed(view, earlier)  # raises: still unsure
                self._unsure.forget(*same)
                if found is not None:
                    return cast(T, found.result)  # it landed, whatever landed after it
                pending = [s for s in earlier if s.head == view.head]  # may still land
            try:
                return self._attempts(decide, needs_clock, pending)
            except Unsure as exc:
                if same is not None:
                    self._unsure.note(*same, exc.sent)
                raise UnsureWriteError(str(exc)) from None

    def _attempts(
        self, decide: Callable[[View], Step[T]], needs_clock: bool, lost: list[Sent[T]]
    ) -> T:
        """:meth:`_transact`'s loop. ``lost``: attempts whose answer was lost and that may
        still land (each on the head it expected, if the branch is still there), oldest first.

        A decision never writes nothing on the head a lost attempt expected (the same
        content decides the same), so a lost attempt that may still land is always raced by
        a commit on its head, and then found by the look.
        """
        view, fresh = self._view, False
        if view is None and not needs_clock:
            view, fresh = self._first_view(), True
        elif view is None or needs_clock:
            view, fresh = self._refresh(), True
        attempt = 0
        try:
            while attempt < MAX_ATTEMPTS:
                step, view = self._decide(view, lambda v: self._migrating(v, decide(v)))
                self._view = view
                if not step.writes:
                    if fresh:
                        return step.result
                    view, fresh = self._refresh(), True
                    continue
                if view.head is None:
                    self._create_branch()
                    view, fresh = self._refresh(), True
                    continue
                write_id = new_id()
                try:
                    head = self._git.commit(view.head, step.additions, step.deletions,
                                            step.message, body=trailer(write_id))  # fmt: skip
                except LostAnswer:
                    lost.append(Sent(view.head, write_id, step.result))
                    head = None
                if head is not None:
                    self._view = after(view, step, head)
                    return step.result
                self._pause(attempt)
                attempt += 1
                view, fresh = self._refresh(), True
                found = self._landed(view, lost)
                if found is not None:
                    return found.result  # a commit of ours landed; its answer was lost
                lost = [s for s in lost if s.head == view.head]  # the others never will
        except StoreRefusedError:
            raise  # the branch went (or the token cannot write it): retrying does not help
        except StoreUnavailableError as exc:
            if lost:
                raise Unsure(str(exc), tuple(lost)) from None
            raise
        moved = (
            f"state: {self._git.where}: the branch kept moving under {MAX_ATTEMPTS} attempts "
            "to write it (heavy contention); try again"
        )
        if lost:  # looked up as not landed, but one may still land: unsure
            raise Unsure(moved, tuple(lost))
        raise StoreUnavailableError(moved)

    def _landed(self, view: View, sent: list[Sent[T]] | tuple[Sent[T], ...]) -> Sent[T] | None:
        """The attempt of ``sent`` on the branch at ``view``'s head (its history), if any."""
        if not sent or view.head is None:
            return None
        git = self._git
        return landed(git.client, git.owner, git.repo, git.where, view.head, sent)

    def _migrating(self, view: View, step: Step[T]) -> Step[T]:
        """``step`` plus the files that lay out the index, if the branch lacks them."""
        if not step.writes or view.head is None or ACTIVE_PATH in step.additions:
            return step
        _, files, deletions = records.index_at(view)
        if not files:
            return step
        return Step(step.result, {**files, **step.additions}, (*deletions, *step.deletions),
                    step.message)  # fmt: skip

    def _pause(self, attempt: int) -> None:
        delay = min(MAX_PAUSE_S, FIRST_PAUSE_S * 2**attempt)
        self._sleep(delay * (0.5 + self._rand()))


__all__ = ["FIRST_PAUSE_S", "MAX_ATTEMPTS", "MAX_PAUSE_S", "BranchWriter", "Same"]
