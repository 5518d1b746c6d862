"""The run record: frozen dataclasses and their JSON wire form.

This module is the only place that knows the camelCase field names of the
published Zuke state format. Everything else works with the dataclasses, so a
record is parsed once, at the boundary, and re-serialised here.

Parsing is tolerant of older or partial records (missing ``signals``,
``events``, ``meta`` or ``degraded`` take their empty defaults) and keeps
unknown fields in ``extra`` so that a record written by a newer or different
implementation round-trips unchanged. Wrong types and unknown statuses raise
:class:`CorruptRecordError` with a message that names the field.

A :class:`RunDelta` is one change to a record. Stores that keep a journal
persist deltas instead of whole records, which keeps the cost of persisting a
run linear in its number of transitions (see ``docs/state.md``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast, get_args

from zuke._errors import CorruptRecordError

RunStatus = Literal["running", "suspended", "cancelling", "succeeded", "failed", "cancelled"]
TargetStatus = Literal["pending", "running", "succeeded", "failed", "skipped", "waiting"]
EventOutcome = Literal["ok", "denied", "error"]

RUN_STATUSES: tuple[RunStatus, ...] = get_args(RunStatus)
TARGET_STATUSES: tuple[TargetStatus, ...] = get_args(TargetStatus)
TERMINAL_STATUSES: frozenset[RunStatus] = frozenset({"succeeded", "failed", "cancelled"})

_EMPTY: Mapping[str, Any] = {}


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


@dataclass(frozen=True)
class TargetRecord:
    """The durable row of one target."""

    status: TargetStatus = "pending"
    meta: Mapping[str, Any] = field(default_factory=dict)
    started_at: str | None = None
    ended_at: str | None = None
    error: str | None = None
    waiting_for: WaitingFor | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Signal:
    """A signal delivered to a run from outside: its JSON payload and arrival time."""

    data: Any
    received_at: str


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
    """The durable state of one run."""

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


def apply_delta(record: RunRecord, delta: RunDelta) -> RunRecord:
    """Return ``record`` with ``delta`` applied."""
    return apply_deltas(record, (delta,))


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
    for delta in deltas:
        changes["updated_at"] = delta.updated_at
        for name in ("status", "actor", "degraded", "deadline_at", "intended_terminal"):
            value = getattr(delta, name)
            if value is not None:
                changes[name] = value
        if delta.targets:
            targets = dict(record.targets) if targets is None else targets
            targets.update(delta.targets)
        if delta.signals:
            signals = dict(record.signals) if signals is None else signals
            signals.update(delta.signals)
        if delta.events:
            events = list(record.events) if events is None else events
            events.extend(delta.events)
        if delta.locks:
            locks = dict(record.locks) if locks is None else locks
            for key, token in delta.locks.items():
                if token is None:
                    locks.pop(key, None)
                else:
                    locks[key] = token
    if targets is not None:
        changes["targets"] = targets
    if signals is not None:
        changes["signals"] = signals
    if events is not None:
        changes["events"] = tuple(events)
    if locks is not None:
        changes["locks"] = locks
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
    )


# ---------------------------------------------------------------- to JSON


def _optional(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def waiting_for_to_json(w: WaitingFor) -> dict[str, Any]:
    out: dict[str, Any] = {"trigger": w.trigger}
    _optional(out, "deadline", w.deadline)
    out["onTimeout"] = {"target": w.on_timeout} if w.on_timeout_is_target else w.on_timeout
    return out


def target_to_json(t: TargetRecord) -> dict[str, Any]:
    out: dict[str, Any] = dict(t.extra)
    out["status"] = t.status
    out["meta"] = dict(t.meta)
    _optional(out, "startedAt", t.started_at)
    _optional(out, "endedAt", t.ended_at)
    _optional(out, "error", t.error)
    if t.waiting_for is not None:
        out["waitingFor"] = waiting_for_to_json(t.waiting_for)
    return out


def _signal_to_json(s: Signal) -> dict[str, Any]:
    return {"data": s.data, "receivedAt": s.received_at}


def _event_to_json(e: RunEvent) -> dict[str, Any]:
    out: dict[str, Any] = {
        "at": e.at,
        "tool": e.tool,
        "actor": e.actor,
        "outcome": e.outcome,
        "args": dict(e.args),
    }
    _optional(out, "detail", e.detail)
    return out


def record_to_json(r: RunRecord) -> dict[str, Any]:
    """The wire form of a record (camelCase keys, optional keys only when set)."""
    out: dict[str, Any] = dict(r.extra)
    out.update(
        {
            "id": r.id,
            "build": r.build,
            "rootTarget": r.root_target,
            "status": r.status,
            "actor": r.actor,
            "createdAt": r.created_at,
            "updatedAt": r.updated_at,
            "graph": [{"name": n.name, "dependsOn": list(n.depends_on)} for n in r.graph],
            "params": dict(r.params),
            "targets": {name: target_to_json(t) for name, t in r.targets.items()},
            "signals": {name: _signal_to_json(s) for name, s in r.signals.items()},
            "events": [_event_to_json(e) for e in r.events],
            "degraded": r.degraded,
        }
    )
    _optional(out, "buildId", r.build_id)
    _optional(out, "deadlineAt", r.deadline_at)
    _optional(out, "intendedTerminal", r.intended_terminal)
    if r.locks:
        out["locks"] = dict(r.locks)
    return out


def holder_to_json(holder: LockHolder) -> dict[str, str]:
    out = {"actor": holder.actor, "runId": holder.run_id, "since": holder.since}
    if holder.run_url is not None:
        out["runUrl"] = holder.run_url
    return out


def parse_holder(raw: Any, *, where: str = "lock holder") -> LockHolder:
    """The wire form ``{actor, runId, since, runUrl?}``; anything else is corrupt."""
    rd = _Reader(where)
    obj = rd.obj(raw, "holder")
    return LockHolder(
        actor=rd.string(obj, "actor"),
        run_id=rd.string(obj, "runId"),
        since=rd.string(obj, "since"),
        run_url=rd.opt_string(obj, "runUrl"),
    )


def summary_to_json(s: RunSummary) -> dict[str, Any]:
    return {
        "id": s.id,
        "build": s.build,
        "rootTarget": s.root_target,
        "status": s.status,
        "actor": s.actor,
        "createdAt": s.created_at,
        "updatedAt": s.updated_at,
    }


def delta_to_json(d: RunDelta) -> dict[str, Any]:
    out: dict[str, Any] = {"updatedAt": d.updated_at}
    _optional(out, "status", d.status)
    _optional(out, "actor", d.actor)
    _optional(out, "degraded", d.degraded)
    _optional(out, "deadlineAt", d.deadline_at)
    _optional(out, "intendedTerminal", d.intended_terminal)
    if d.targets:
        out["targets"] = {name: target_to_json(t) for name, t in d.targets.items()}
    if d.signals:
        out["signals"] = {name: _signal_to_json(s) for name, s in d.signals.items()}
    if d.events:
        out["events"] = [_event_to_json(e) for e in d.events]
    if d.locks:
        out["locks"] = dict(d.locks)
    return out


def dumps_record(r: RunRecord) -> str:
    """Pretty-printed JSON with a trailing newline (the stored form)."""
    return json.dumps(record_to_json(r), indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- from JSON

_RECORD_KEYS = frozenset(
    {
        "id", "build", "buildId", "rootTarget", "status", "actor", "createdAt", "updatedAt",
        "graph", "params", "targets", "signals", "events", "degraded", "deadlineAt",
        "intendedTerminal", "locks",
    }
)  # fmt: skip
_TARGET_KEYS = frozenset({"status", "meta", "startedAt", "endedAt", "error", "waitingFor"})


class _Reader:
    """Typed field access that names the offending field on failure."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, what: str) -> CorruptRecordError:
        return CorruptRecordError(f"state: {self.where}: {what}")

    def obj(self, value: Any, name: str) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{name} must be an object, got {type(value).__name__}")
        return value

    def string(self, obj: Mapping[str, Any], key: str) -> str:
        value = obj.get(key)
        if not isinstance(value, str):
            raise self.fail(f'"{key}" must be a string')
        return value

    def opt_string(self, obj: Mapping[str, Any], key: str) -> str | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.fail(f'"{key}" must be a string when present')
        return value

    def status(self, obj: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
        value = self.string(obj, key)
        if value not in allowed:
            raise self.fail(f'"{key}" is "{value}", expected one of {", ".join(allowed)}')
        return value


def _parse_waiting_for(rd: _Reader, raw: Any) -> WaitingFor:
    obj = rd.obj(raw, "waitingFor")
    on_timeout = obj.get("onTimeout", "fail")
    if isinstance(on_timeout, dict) and isinstance(on_timeout.get("target"), str):
        return WaitingFor(
            trigger=rd.string(obj, "trigger"),
            deadline=rd.opt_string(obj, "deadline"),
            on_timeout=on_timeout["target"],
            on_timeout_is_target=True,
        )
    if on_timeout not in ("fail", "cancel-run"):
        raise rd.fail('"onTimeout" must be "fail", "cancel-run" or {"target": name}')
    return WaitingFor(
        trigger=rd.string(obj, "trigger"),
        deadline=rd.opt_string(obj, "deadline"),
        on_timeout=on_timeout,
    )


def parse_target(raw: Any, where: str) -> TargetRecord:
    rd = _Reader(where)
    obj = rd.obj(raw, "target row")
    meta = obj.get("meta")
    waiting = obj.get("waitingFor")
    return TargetRecord(
        status=cast(TargetStatus, rd.status(obj, "status", TARGET_STATUSES)),
        meta={} if meta is None else dict(rd.obj(meta, "meta")),
        started_at=rd.opt_string(obj, "startedAt"),
        ended_at=rd.opt_string(obj, "endedAt"),
        error=rd.opt_string(obj, "error"),
        waiting_for=None if waiting is None else _parse_waiting_for(rd, waiting),
        extra={k: v for k, v in obj.items() if k not in _TARGET_KEYS},
    )


def _parse_signal(rd: _Reader, name: str, raw: Any) -> Signal:
    obj = rd.obj(raw, f"signal {name!r}")
    return Signal(data=obj.get("data"), received_at=rd.string(obj, "receivedAt"))


def _parse_event(rd: _Reader, raw: Any) -> RunEvent:
    obj = rd.obj(raw, "event")
    outcome = obj.get("outcome", "ok")
    if outcome not in ("ok", "denied", "error"):
        raise rd.fail(f'event "outcome" is {outcome!r}, expected ok, denied or error')
    args = obj.get("args") or {}
    return RunEvent(
        at=rd.string(obj, "at"),
        tool=rd.string(obj, "tool"),
        actor=rd.string(obj, "actor"),
        outcome=outcome,
        args={str(k): str(v) for k, v in rd.obj(args, "event args").items()},
        detail=rd.opt_string(obj, "detail"),
    )


def parse_record(raw: Any, *, where: str = "run record") -> RunRecord:
    """Parse the wire form of a record, tolerating missing optional parts."""
    rd = _Reader(where)
    obj = rd.obj(raw, "record")
    run_id = obj.get("id")
    if isinstance(run_id, str) and repr(run_id) not in where:
        # Name the run, but keep the caller's context (a file, a request) too.
        rd = _Reader(f"run {run_id!r}" if where == "run record" else f"{where} (run {run_id!r})")
    graph_raw = obj.get("graph") or []
    if not isinstance(graph_raw, list):
        raise rd.fail('"graph" must be a list')
    graph = []
    for node in graph_raw:
        node_obj = rd.obj(node, "graph node")
        deps = node_obj.get("dependsOn") or []
        if not isinstance(deps, list) or not all(isinstance(d, str) for d in deps):
            raise rd.fail('graph "dependsOn" must be a list of strings')
        graph.append(GraphNode(name=rd.string(node_obj, "name"), depends_on=tuple(deps)))
    params = rd.obj(obj.get("params") or {}, "params")
    targets = rd.obj(obj.get("targets") or {}, "targets")
    signals = rd.obj(obj.get("signals") or {}, "signals")
    events = obj.get("events") or []
    if not isinstance(events, list):
        raise rd.fail('"events" must be a list')
    degraded = obj.get("degraded", False)
    if not isinstance(degraded, bool):
        raise rd.fail('"degraded" must be a boolean')
    intended = obj.get("intendedTerminal")
    if intended is not None and intended not in RUN_STATUSES:
        raise rd.fail(f'"intendedTerminal" is {intended!r}, not a run status')
    return RunRecord(
        id=rd.string(obj, "id"),
        build=rd.string(obj, "build"),
        root_target=rd.string(obj, "rootTarget"),
        status=cast(RunStatus, rd.status(obj, "status", RUN_STATUSES)),
        actor=rd.string(obj, "actor"),
        created_at=rd.string(obj, "createdAt"),
        updated_at=rd.string(obj, "updatedAt"),
        graph=tuple(graph),
        params={str(k): str(v) for k, v in params.items()},
        targets={
            name: parse_target(row, f"{rd.where} target {name!r}") for name, row in targets.items()
        },
        signals={name: _parse_signal(rd, name, s) for name, s in signals.items()},
        events=tuple(_parse_event(rd, e) for e in events),
        degraded=degraded,
        build_id=rd.opt_string(obj, "buildId"),
        deadline_at=rd.opt_string(obj, "deadlineAt"),
        intended_terminal=cast("RunStatus | None", intended),
        locks=_parse_locks(rd, obj.get("locks")),
        extra={k: v for k, v in obj.items() if k not in _RECORD_KEYS},
    )


def _parse_locks(rd: _Reader, raw: Any) -> dict[str, str]:
    locks = rd.obj(raw or {}, "locks")
    if not all(isinstance(v, str) for v in locks.values()):
        raise rd.fail('"locks" must map lock keys to token strings')
    return dict(locks)


def parse_summary(raw: Any, *, where: str = "run summary") -> RunSummary:
    rd = _Reader(where)
    obj = rd.obj(raw, "summary")
    return RunSummary(
        id=rd.string(obj, "id"),
        build=rd.string(obj, "build"),
        root_target=rd.string(obj, "rootTarget"),
        status=cast(RunStatus, rd.status(obj, "status", RUN_STATUSES)),
        actor=rd.string(obj, "actor"),
        created_at=rd.string(obj, "createdAt"),
        updated_at=rd.string(obj, "updatedAt"),
    )


def parse_delta(raw: Any, *, where: str = "run delta") -> RunDelta:
    rd = _Reader(where)
    obj = rd.obj(raw, "delta")
    status = obj.get("status")
    if status is not None and status not in RUN_STATUSES:
        raise rd.fail(f'"status" is {status!r}, not a run status')
    intended = obj.get("intendedTerminal")
    if intended is not None and intended not in RUN_STATUSES:
        raise rd.fail(f'"intendedTerminal" is {intended!r}, not a run status')
    degraded = obj.get("degraded")
    if degraded is not None and not isinstance(degraded, bool):
        raise rd.fail('"degraded" must be a boolean')
    targets = rd.obj(obj.get("targets") or {}, "targets")
    signals = rd.obj(obj.get("signals") or {}, "signals")
    events = obj.get("events") or []
    if not isinstance(events, list):
        raise rd.fail('"events" must be a list')
    return RunDelta(
        updated_at=rd.string(obj, "updatedAt"),
        status=cast("RunStatus | None", status),
        actor=rd.opt_string(obj, "actor"),
        degraded=degraded,
        deadline_at=rd.opt_string(obj, "deadlineAt"),
        intended_terminal=cast("RunStatus | None", intended),
        targets={
            name: parse_target(row, f"{where} target {name!r}") for name, row in targets.items()
        },
        signals={name: _parse_signal(rd, name, s) for name, s in signals.items()},
        events=tuple(_parse_event(rd, e) for e in events),
        locks=_parse_delta_locks(rd, obj.get("locks")),
    )


def _parse_delta_locks(rd: _Reader, raw: Any) -> dict[str, str | None]:
    locks = rd.obj(raw or {}, "locks")
    if not all(v is None or isinstance(v, str) for v in locks.values()):
        raise rd.fail('"locks" must map lock keys to a token string or null')
    return dict(locks)


def loads_record(text: str | bytes, *, where: str = "run record") -> RunRecord:
    """Parse stored JSON text; invalid JSON is a :class:`CorruptRecordError`."""
    try:
        raw = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptRecordError(f"state: {where} is not valid JSON ({exc})") from None
    return parse_record(raw, where=where)


__all__ = [
    "RUN_STATUSES",
    "TARGET_STATUSES",
    "TERMINAL_STATUSES",
    "GraphNode",
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
    "delta_to_json",
    "dumps_record",
    "holder_to_json",
    "loads_record",
    "merge_deltas",
    "parse_delta",
    "parse_holder",
    "parse_record",
    "parse_summary",
    "record_to_json",
    "summary_to_json",
]
