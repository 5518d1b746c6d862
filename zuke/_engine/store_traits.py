"""What the engine asks of a store beyond the protocol: how to name it, how to write to it."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING

from zuke.state._protocol import StateStore
from zuke.state.naming import store_name
from zuke.state.records import RunRecord

if TYPE_CHECKING:
    from zuke._engine.plan import TargetSpec

#: On a checkpointed store (every write is costly: a commit), the longest a change waits.
CHECKPOINT_DEBOUNCE_S = 60.0


def checkpointed(store: StateStore) -> bool:
    """Whether ``store`` asks to be written at durability points only.

    A store whose every write is costly — the GitHub branch store, where each
    is a commit and GitHub allows 80 a minute per token — sets a true
    ``checkpointed`` attribute. Its run's transitions are then coalesced: they
    are written when the run is created, suspends or ends, when a trigger or
    an effect asks for ``persist()`` (before an external call), and otherwise
    at most every :data:`CHECKPOINT_DEBOUNCE_S`; a ``running`` row is not
    awaited before its body. What a crash then loses is since the last
    durability point, which a resume re-drives (see docs/state.md).
    """
    return getattr(store, "checkpointed", False) is True


def local(store: StateStore) -> bool:
    """Whether a write to ``store`` is cheap and bounded enough to make on the event loop's
    thread while nothing else of the run needs the loop (see ``RunStateWriter.inline``).

    A store says so with a true ``inline_writes`` attribute *of its own class*: the
    filesystem store (a small append under a mutex whose wait is bounded by its
    ``mutex_timeout_s``), the memory store, and the Postgres store (one round trip on a
    pooled connection: less than the hop to a worker thread and back). It is not
    inherited: a subclass or a wrapper (a test's faulty store, a store that may stall)
    is written from a worker thread unless its own class says so too.
    """
    return type(store).__dict__.get("inline_writes", False) is True


def lazy_after(store: StateStore) -> bool:
    """Whether ``store``'s ``append_run_known`` takes, as ``after``, a function that makes the
    record the delta leaves (called only when a compaction is due), so that a writer need not
    apply each delta to its record as it writes it. A store says so with a true
    ``append_after_lazily`` attribute of its own class (the filesystem and Postgres
    stores); any other store's writes go through ``update_run``, which hands it the record
    itself.
    """
    return type(store).__dict__.get("append_after_lazily", False) is True


def sends_appends(store: StateStore) -> bool:
    """Whether ``store`` can send an append now and answer it later: a
    ``send_append_known(run_id, delta, *, expected_version, after)`` of its own class that
    returns a function waiting for the answer (what ``append_run_known`` returns or raises)
    or ``None`` (not sent: write it the ordinary way). The run's writer then overlaps a
    transition's round trip with the engine's work before the next body
    (:mod:`zuke._engine.sent_writes`); the Postgres store has it. Like :func:`local`, not
    inherited: a wrapper or a test's faulty subclass says so itself.
    """
    return callable(type(store).__dict__.get("send_append_known"))


#: What any resume writes besides its targets' own: the lease, ``running``, its end (or its
#: next suspension), the lease given back.
RESUME_WRITES = 4
#: Settling a gate that timed out or failed, or stamping a check: the lease, the write, the
#: lease given back.
SETTLE_WRITES = 3
#: A check's stamp (bookkeeping: when a gate was asked, what it said) never takes the last
#: writes of a budget: they are kept for resumes (25 of 4 writes).
STAMP_HEADROOM = 100


def reserve_writes(store: StateStore, writes: int) -> bool:
    """Whether ``store``'s write budget affords ``writes`` more writes now.

    A store whose writes are rationed (the GitHub branch store: GitHub allows
    500 content-creating requests an hour per token) has a ``reserve_writes(n)
    -> bool`` method; a sweep asks it before it starts something it must not
    leave half done, and defers what does not fit to the next sweep. A store
    without the method has no such budget: it always affords.
    """
    reserve = getattr(store, "reserve_writes", None)
    return True if not callable(reserve) else reserve(writes) is True


def resume_writes(
    specs: Mapping[str, TargetSpec], record: RunRecord, passed: Collection[str] = ()
) -> int:
    """About how many writes resuming ``record`` costs on a checkpointed store.

    :data:`RESUME_WRITES`, plus for each target not yet done: a lock's claim and
    release (2), a gate's ``persist()`` before its external call and the call (2; not for
    the gates in ``passed``, which the resume passes),
    each effect's intent (1), a fan-out's items (2). Bodies' own transitions are
    coalesced into these (``checkpointed``). An estimate: the budget's headroom
    under GitHub's limit absorbs what a long run adds (a checkpoint a minute).
    """
    writes = RESUME_WRITES
    for name, spec in specs.items():
        row = record.targets.get(name)
        if name in passed or (row is not None and row.status in ("succeeded", "skipped", "failed")):
            continue
        writes += 2 * (spec.lock is not None) + 2 * (spec.wait is not None)
        writes += len(spec.effects) + 2 * (spec.fan_out is not None)
    return writes


def describe_store(store: StateStore) -> str:
    """The store's name for messages: a directory, ``postgresql://USER@HOST:PORT/DB``,
    ``github://OWNER/REPO@BRANCH``, a URL — never a repr (:func:`zuke.state.naming.store_name`,
    which the CLI's listings use too: one rule, in the state layer both may import)."""
    return store_name(store)
