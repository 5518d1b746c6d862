"""``update_run``: the one compare-and-swap loop for changing a stored run.

Every writer of a run record — the run's own state writer, ``zuke cancel``,
and whatever later steps add — goes through :func:`update_run`, so there is
one retry budget and one place that decides how a change is persisted: an
append of the :class:`~zuke.state.records.RunDelta` on a
:class:`~zuke.state._protocol.JournalingStateStore` (linear cost), a
whole-record ``put_run`` otherwise.

``change(record)`` is called with the record as it is *now* — re-read after
every conflict — and returns the delta to apply, or ``None`` when there is
nothing to do (a cancel of a run that already ended, a writer whose run was
settled by another process). It may raise to refuse (a run of another build).

Conflicts are outcomes (:class:`GaveUp`); a store that cannot answer raises,
as stores do (:class:`~zuke.StoreUnavailableError`, or whatever a third-party
store raises), and a run that is not in the store is
:class:`~zuke.RunNotFoundError`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from zuke._errors import RunNotFoundError
from zuke.state._protocol import (
    Conflict,
    JournalingStateStore,
    StateStore,
    StoredRun,
    Written,
    can_append,
)
from zuke.state._unsure import UnsureWriteError
from zuke.state.records import RunDelta, RunRecord, apply_delta

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: Attempts (the first write and its re-applications) before :func:`update_run` gives up.
MAX_ATTEMPTS = 10


@dataclass(frozen=True)
class Updated:
    """The change landed: ``record`` is the stored record now, at ``version``."""

    record: RunRecord
    version: str
    #: the delta that landed (computed from the record as it was just before)
    delta: RunDelta
    attempts: int


@dataclass(frozen=True)
class Unchanged:
    """``change`` returned ``None`` for ``record`` (read at ``version``): nothing was written."""

    record: RunRecord
    version: str


@dataclass(frozen=True)
class GaveUp:
    """Every attempt conflicted; ``record`` / ``version`` is the last one read."""

    record: RunRecord
    version: str
    attempts: int


UpdateResult = Updated | Unchanged | GaveUp


def update_run(
    store: StateStore,
    run_id: str,
    change: Callable[[RunRecord], RunDelta | None],
    *,
    attempts: int = MAX_ATTEMPTS,
    known: StoredRun | None = None,
) -> UpdateResult:
    """Apply ``change`` to run ``run_id`` with compare-and-swap, re-reading on conflict.

    ``known`` is a record the caller already holds (the state writer's last
    write): the first attempt writes against it without reading the store.
    """
    attempts = max(1, attempts)
    current = known
    for attempt in range(1, attempts + 1):
        if current is None:
            current = store.get_run(run_id)
            if current is None:
                raise RunNotFoundError(f'no run "{run_id}" in the store', run_id=run_id)
        delta = change(current.record)
        if delta is None:
            return Unchanged(current.record, current.version)
        new = apply_delta(current.record, delta)
        try:
            outcome = _write(store, run_id, delta, new, current.version)
        except UnsureWriteError as exc:
            exc.based_on = current  # what the retry must send it against (see there)
            raise
        if not isinstance(outcome, Conflict):
            return Updated(new, outcome.version, delta, attempt)
        if attempt == attempts:
            return GaveUp(current.record, current.version, attempts)
        current = None
    raise AssertionError("unreachable")


def _write(
    store: StateStore, run_id: str, delta: RunDelta, new: RunRecord, expected: str
) -> Written | Conflict:
    if can_append(store):
        journal = cast("JournalingStateStore", store)
        # A store that can use the record the delta makes (the filesystem store:
        # a compaction due writes it, instead of reading back the whole journal).
        known_append = getattr(journal, "append_run_known", None)
        if callable(known_append):
            found: Written | Conflict = known_append(
                run_id, delta, expected_version=expected, after=new
            )
            return found
        return journal.append_run(run_id, delta, expected_version=expected)
    return store.put_run(new, expected_version=expected)


__all__ = ["MAX_ATTEMPTS", "GaveUp", "Unchanged", "UpdateResult", "Updated", "update_run"]
