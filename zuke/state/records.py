"""The run record as frozen dataclasses, and changes to it (:class:`RunDelta`).

The JSON wire form (camelCase) lives in :mod:`zuke.state.wire`; everything
else works with these dataclasses.

A :class:`RunDelta` is one change to a record. Stores that keep a journal
persist deltas instead of whole records, which keeps the cost of persisting a
run linear in its number of transitions (see ``docs/state.md``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Literal, TypeVar, get_args

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # the same frozen dataclasses, without compiling their methods at import (_frozen)
    from zuke.state._frozen import dataclass

from zuke.state._frozen import replace

RunStatus = Literal["running", "suspended", "cancelling", "succeeded", "failed", "cancelled"]
TargetStatus = Literal["pending", "running", "succeeded", "failed", "skipped", "waiting"]
EventOutcome = Literal["ok", "denied", "error"]
#: where the run's starter's name came from: ``"github"`` (a login GitHub Actions gave:
#: ``GITHUB_TRIGGERING_ACTOR`` / ``GITHUB_ACTOR``) or ``"local"`` (a name anyone can type)
ActorSource = Literal["github", "local"]

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
TARGET_STATUSES: tuple[TargetStatus, ...] = get_args(TargetStatus)
TERMINAL_STATUSES: frozenset[RunStatus] = frozenset({"succeeded", "failed", "cancelled"})

_EMPTY: Mapping[str, Any] = {}
_V = TypeVar("_V")


@dataclass(frozen=True)
class LockHolder:
    """Who holds a lock. Descriptive only: never an authorisation input."""

    actor: str
    run_id: str
    since: str
    run_url: str | None = None


@dataclass(frozen=True)
class GraphNode:
    """One planned target and the names of its hard dependencies."""

    name: str
    depends_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class WaitingFor:
    """Why a ``waiting`` target is parked: its trigger, deadline and timeout disposition.

    ``on_timeout`` is ``"fail"``, ``"cancel-run"`` or the name of a target to run.
    ``on_timeout_is_target`` tells the last case apart from a target named ``fail``.
    """

    trigger: str
    deadline: str | None = None
    on_timeout: str = "fail"
    on_timeout_is_target: bool = False
    #: when the trigger was last asked (a sweep honours its interval from here)
    checked_at: str | None = None
    #: what the last check said ("waiting for the signal 'approved'", a predicate's error)
    detail: str | None = None
    #: the trigger answered ``WaitFailed`` (this reason) in a process that hands the gate's
    #: ``on_failure`` disposition to the next holder of the run: settled, never asked again
    failed: str | None = None


EffectStatus = Literal["pending", "done", "failed"]


@dataclass(frozen=True)
class EffectRecord:
    """One crash-durable effect of a target: its intent is recorded before it runs."""

    status: EffectStatus
    intent_at: str | None = None
    attempts: int = 1
    done_at: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class HeldLock:
    """A run-held lock (``s.held_until(target)``): taken at ``target``, released after ``until``.

    Its token is in :attr:`RunRecord.locks` under the same key; this says why the run keeps
    it past its target's body, so that a resumer can adopt it (renew it at ``ttl_ms`` under
    its own heartbeat) and every way out of the run can release it.
    """

    target: str
    until: str
    ttl_ms: int
    #: the fence its acquisition returned (``ctx.lock.fence`` when ``until`` locks it too)
    fence: int = 0


@dataclass(frozen=True)
class TargetRecord:
    """The durable row of one target."""

    status: TargetStatus = "pending"
    meta: Mapping[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    ended_at: str | None = None
    error: str | None = None
    waiting_for: WaitingFor | None = None
    effects: Mapping[str, EffectRecord] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: it was running when the run was stopped (cancelled): its work may be partly done
    interrupted: bool = False
    #: the environment this target deploys to (``t.environment(...)``), set from the plan
    environment: str | None = None
    #: where that environment is reached: ``url=`` (a string, or a callable of ``ctx``
    #: evaluated as the target starts) or ``ctx.environment_url`` set by the body
    environment_url: str | None = None


@dataclass(frozen=True)
class Signal:
    """A signal delivered to a run from outside: its JSON payload and arrival time."""

    data: Any
    received_at: str
    #: the delivery's idempotency key: a repeated delivery with the same id is a no-op
    id: str | None = None


@dataclass(frozen=True)
class RunEvent:
    """One entry of a run's append-only audit trail."""

    at: str
    tool: str
    actor: str
    outcome: EventOutcome = "ok"
    args: Mapping[str, str] = field(default_factory=dict)
    detail: str | None = None


@dataclass(frozen=True)
class RunRecord:
    """The durable state of one run.

    ``actor`` is who started the run, written by its first write and never changed: a
    resumer, a sweep, a reaper or a canceller records its own actor in its event.
    """

    id: str
    build: str
    root_target: str
    status: RunStatus
    actor: str
    created_at: str
    updated_at: str
    graph: tuple[GraphNode, ...] = ()
    params: Mapping[str, str] = field(default_factory=dict)
    targets: Mapping[str, TargetRecord] = field(default_factory=dict)
    signals: Mapping[str, Signal] = field(default_factory=dict)
    events: tuple[RunEvent, ...] = ()
    degraded: bool = False
    build_id: str | None = None
    deadline_at: str | None = None
    intended_terminal: RunStatus | None = None
    #: the claims the run holds right now: lock key -> token (its lease included), so
    #: that ``zuke cancel`` in another process can give them back
    locks: Mapping[str, str] = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: the run-held locks among ``locks`` (``held_until``): key -> why and until when
    held: Mapping[str, HeldLock] = field(default_factory=dict)
    #: when the run last became ``suspended`` (set by :func:`apply_deltas`, never by an
    #: audit write): a resume credits the time parked since then to ``deadlineAt``
    parked_at: str | None = None
    #: where ``actor`` came from (a record written before it was kept reads ``"local"``)
    actor_source: ActorSource = "local"

    def summary(self) -> RunSummary:
        return RunSummary(
            id=self.id,
            build=self.build,
            root_target=self.root_target,
            status=self.status,
            actor=self.actor,
            created_at=self.created_at,
            updated_at=self.updated_at,
        )


@dataclass(frozen=True)
class RunSummary:
    """What a listing shows of a run."""

    id: str
    build: str
    root_target: str
    status: RunStatus
    actor: str
    created_at: str
    updated_at: str


@dataclass(frozen=True)
class RunDelta:
    """One change to a run record.

    ``None`` fields are unchanged. ``targets`` replaces whole rows, ``signals``
    sets entries, ``events`` are appended; in ``locks`` a ``None`` token removes the key.
    ``actor`` is read from journals written before the starter was kept for ever (a resume
    then overwrote it); zuke writes it no more.
    """

    updated_at: str
    status: RunStatus | None = None
    actor: str | None = None
    degraded: bool | None = None
    deadline_at: str | None = None
    intended_terminal: RunStatus | None = None
    targets: Mapping[str, TargetRecord] = field(default_factory=dict)
    signals: Mapping[str, Signal] = field(default_factory=dict)
    events: tuple[RunEvent, ...] = ()
    locks: Mapping[str, str | None] = field(default_factory=dict)
    #: parameter values set (a resume's non-secret overrides)
    params: Mapping[str, str] = field(default_factory=dict)
    #: with ``status="suspended"``: when the run was parked, if not ``updated_at`` (a merged
    #: delta keeps the first suspension's time)
    parked_at: str | None = None
    #: run-held locks set, or removed (``None``)
    held: Mapping[str, HeldLock | None] = field(default_factory=dict)


def apply_delta(record: RunRecord, delta: RunDelta) -> RunRecord:
    """Return ``record`` with ``delta`` applied."""
    return apply_deltas(record, (delta,))


def _set_or_drop(into: dict[str, _V], changes: Mapping[str, _V | None]) -> None:
    """A delta's keyed map (locks, held): a value sets its key, ``None`` removes it."""
    for key, value in changes.items():
        if value is None:
            into.pop(key, None)
        else:
            into[key] = value


def apply_deltas(record: RunRecord, deltas: Iterable[RunDelta]) -> RunRecord:
    """Return ``record`` with ``deltas`` applied in order.

    Accumulates into mutable maps and builds the record once: applying a long
    journal one delta at a time would copy the target map per delta (quadratic).
    """
    changes: dict[str, Any] = {}
    targets: dict[str, TargetRecord] | None = None
    signals: dict[str, Signal] | None = None
    events: list[RunEvent] | None = None
    locks: dict[str, str] | None = None
    params: dict[str, str] | None = None
    held: dict[str, HeldLock] | None = None
    for delta in deltas:
        changes["updated_at"] = delta.updated_at
        for name in ("status", "actor", "degraded", "deadline_at", "intended_terminal"):
            value = getattr(delta, name)
            if value is not None:
                changes[name] = value
        if delta.status == "suspended":  # parked now: the clock a resume credits starts here
            changes["parked_at"] = delta.parked_at or delta.updated_at
        if delta.targets:
            targets = dict(record.targets) if targets is None else targets
            targets.update(delta.targets)
        if delta.signals:
            signals = dict(record.signals) if signals is None else signals
            signals.update(delta.signals)
        if delta.events:
            events = list(record.events) if events is None else events
            events.extend(delta.events)
        if delta.params:
            params = dict(record.params) if params is None else params
            params.update(delta.params)
        if delta.locks:
            locks = dict(record.locks) if locks is None else locks
            _set_or_drop(locks, delta.locks)
        if delta.held:
            held = dict(record.held) if held is None else held
            _set_or_drop(held, delta.held)
    if targets is not None:
        changes["targets"] = targets
    if signals is not None:
        changes["signals"] = signals
    if events is not None:
        changes["events"] = tuple(events)
    if locks is not None:
        changes["locks"] = locks
    if params is not None:
        changes["params"] = params
    if held is not None:
        changes["held"] = held
    return replace(record, **changes) if changes else record


def merge_deltas(first: RunDelta, second: RunDelta) -> RunDelta:
    """One delta with the effect of applying ``first`` then ``second``."""

    def pick(a: Any, b: Any) -> Any:
        return b if b is not None else a

    return RunDelta(
        updated_at=second.updated_at,
        status=pick(first.status, second.status),
        actor=pick(first.actor, second.actor),
        degraded=pick(first.degraded, second.degraded),
        deadline_at=pick(first.deadline_at, second.deadline_at),
        intended_terminal=pick(first.intended_terminal, second.intended_terminal),
        targets={**first.targets, **second.targets},
        signals={**first.signals, **second.signals},
        events=first.events + second.events,
        locks={**first.locks, **second.locks},
        params={**first.params, **second.params},
        parked_at=_parked(first, second),
        held={**first.held, **second.held},
    )


def _parked(first: RunDelta, second: RunDelta) -> str | None:
    """When the merged delta's suspension happened: the later one that set the status."""
    if second.status is not None:
        return second.parked_at
    if first.status == "suspended":
        return first.parked_at or first.updated_at
    return None


__all__ = [
    "RUN_STATUSES",
    "TARGET_STATUSES",
    "TERMINAL_STATUSES",
    "ActorSource",
    "EffectRecord",
    "EffectStatus",
    "GraphNode",
    "HeldLock",
    "LockHolder",
    "RunDelta",
    "RunEvent",
    "RunRecord",
    "RunStatus",
    "RunSummary",
    "Signal",
    "TargetRecord",
    "TargetStatus",
    "WaitingFor",
    "apply_delta",
    "apply_deltas",
    "merge_deltas",
]
