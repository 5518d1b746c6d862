"""The run record's JSON wire form: the only place that knows its camelCase names.

Records are parsed once, at the boundary (a file, an HTTP body), into the
dataclasses of :mod:`zuke.state.records`, and re-serialised here. Parsing is
tolerant of older or partial records (missing ``signals``, ``events``,
``meta`` or ``degraded`` take their empty defaults) and keeps unknown fields in
``extra`` so a record written by a newer or different implementation
round-trips unchanged. Wrong types and unknown statuses raise
:class:`~zuke.CorruptRecordError` with a message that names the field.
"""

from __future__ import annotations

import json
from typing import Any, cast

from zuke._errors import CorruptRecordError
from zuke.state._wire_target import (
    Reader,
    optional,
    parse_target,
    target_to_json,
    waiting_for_to_json,
)
from zuke.state.records import (
    RUN_STATUSES,
    ActorSource,
    GraphNode,
    HeldLock,
    LockHolder,
    RunDelta,
    RunEvent,
    RunRecord,
    RunStatus,
    RunSummary,
    Signal,
)

# ---------------------------------------------------------------- to JSON


def _signal_to_json(s: Signal) -> dict[str, Any]:
    out: dict[str, Any] = {"data": s.data, "receivedAt": s.received_at}
    optional(out, "id", s.id)
    return out


def _event_to_json(e: RunEvent) -> dict[str, Any]:
    out: dict[str, Any] = {
        "at": e.at,
        "tool": e.tool,
        "actor": e.actor,
        "outcome": e.outcome,
        "args": dict(e.args),
    }
    optional(out, "detail", e.detail)
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
            "actorSource": r.actor_source,
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
    optional(out, "buildId", r.build_id)
    optional(out, "deadlineAt", r.deadline_at)
    optional(out, "intendedTerminal", r.intended_terminal)
    optional(out, "parkedAt", r.parked_at)
    if r.locks:
        out["locks"] = dict(r.locks)
    if r.held:
        out["heldLocks"] = {key: _held_to_json(h) for key, h in r.held.items()}
    return out


def shown_record_json(r: RunRecord) -> dict[str, Any]:
    """The wire form to show a person or a client (``runs show --json``, MCP): each claim's
    token — which renews and releases it — replaced by ``"(held)"``."""
    out = record_to_json(r)
    if "locks" in out:
        out["locks"] = dict.fromkeys(out["locks"], "(held)")
    return out


def _held_to_json(h: HeldLock) -> dict[str, Any]:
    return {"target": h.target, "until": h.until, "ttlMs": h.ttl_ms, "fence": h.fence}


def holder_to_json(holder: LockHolder) -> dict[str, str]:
    out = {"actor": holder.actor, "runId": holder.run_id, "since": holder.since}
    if holder.run_url is not None:
        out["runUrl"] = holder.run_url
    return out


def parse_holder(raw: Any, *, where: str = "lock holder") -> LockHolder:
    """The wire form ``{actor, runId, since, runUrl?}``; anything else is corrupt."""
    rd = Reader(where)
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
    optional(out, "status", d.status)
    optional(out, "actor", d.actor)
    optional(out, "degraded", d.degraded)
    optional(out, "deadlineAt", d.deadline_at)
    optional(out, "intendedTerminal", d.intended_terminal)
    optional(out, "parkedAt", d.parked_at)
    if d.targets:
        out["targets"] = {name: target_to_json(t) for name, t in d.targets.items()}
    if d.signals:
        out["signals"] = {name: _signal_to_json(s) for name, s in d.signals.items()}
    if d.events:
        out["events"] = [_event_to_json(e) for e in d.events]
    if d.locks:
        out["locks"] = dict(d.locks)
    if d.params:
        out["params"] = dict(d.params)
    if d.held:
        out["heldLocks"] = {k: None if h is None else _held_to_json(h) for k, h in d.held.items()}
    return out


def dumps_record(r: RunRecord) -> str:
    """Pretty-printed JSON with a trailing newline (the stored form)."""
    return json.dumps(record_to_json(r), indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- from JSON

ACTOR_SOURCES: tuple[ActorSource, ...] = ("github", "local")

_RECORD_KEYS = frozenset(
    {
        "id", "build", "buildId", "rootTarget", "status", "actor", "actorSource", "createdAt",
        "updatedAt",
        "graph", "params", "targets", "signals", "events", "degraded", "deadlineAt",
        "intendedTerminal", "locks", "parkedAt", "heldLocks",
    }
)  # fmt: skip


def _parse_signal(rd: Reader, name: str, raw: Any) -> Signal:
    obj = rd.obj(raw, f"signal {name!r}")
    return Signal(
        data=obj.get("data"), received_at=rd.string(obj, "receivedAt"), id=rd.opt_string(obj, "id")
    )


def _parse_event(rd: Reader, raw: Any) -> RunEvent:
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
    rd = Reader(where)
    obj = rd.obj(raw, "record")
    run_id = obj.get("id")
    if isinstance(run_id, str) and repr(run_id) not in where:
        # Name the run, but keep the caller's context (a file, a request) too.
        rd = Reader(f"run {run_id!r}" if where == "run record" else f"{where} (run {run_id!r})")
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
    source = obj.get("actorSource", "local")  # a record written before it was kept: local
    if source not in ACTOR_SOURCES:
        raise rd.fail(f'"actorSource" is {source!r}, expected github or local')
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
        parked_at=rd.opt_string(obj, "parkedAt"),
        held={k: h for k, h in _parse_held(rd, obj.get("heldLocks")).items() if h is not None},
        actor_source=cast("ActorSource", source),
    )


def _parse_held(rd: Reader, raw: Any) -> dict[str, HeldLock | None]:
    """``heldLocks``: lock key -> ``{target, until, ttlMs}`` (``null`` in a delta: removed)."""
    out: dict[str, HeldLock | None] = {}
    for key, value in rd.obj(raw or {}, "heldLocks").items():
        if value is None:
            out[key] = None
            continue
        row = rd.obj(value, f"heldLocks {key!r}")
        ttl = row.get("ttlMs")
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl <= 0:
            raise rd.fail(f'heldLocks {key!r}: "ttlMs" must be a positive integer')
        fence = row.get("fence", 0)
        if not isinstance(fence, int) or isinstance(fence, bool):
            raise rd.fail(f'heldLocks {key!r}: "fence" must be an integer')
        out[key] = HeldLock(target=rd.string(row, "target"), until=rd.string(row, "until"),
                            ttl_ms=ttl, fence=fence)  # fmt: skip
    return out


def _parse_locks(rd: Reader, raw: Any) -> dict[str, str]:
    locks = rd.obj(raw or {}, "locks")
    if not all(isinstance(v, str) for v in locks.values()):
        raise rd.fail('"locks" must map lock keys to token strings')
    return dict(locks)


def parse_summary(raw: Any, *, where: str = "run summary") -> RunSummary:
    rd = Reader(where)
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
    rd = Reader(where)
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
        params=_parse_params(rd, obj.get("params")),
        parked_at=rd.opt_string(obj, "parkedAt"),
        held=_parse_held(rd, obj.get("heldLocks")),
    )


def _parse_params(rd: Reader, raw: Any) -> dict[str, str]:
    params = rd.obj(raw or {}, "params")
    if not all(isinstance(v, str) for v in params.values()):
        raise rd.fail('"params" values must be strings')
    return dict(params)


def _parse_delta_locks(rd: Reader, raw: Any) -> dict[str, str | None]:
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
    "delta_to_json",
    "dumps_record",
    "holder_to_json",
    "loads_record",
    "parse_delta",
    "parse_holder",
    "parse_record",
    "parse_summary",
    "parse_target",
    "record_to_json",
    "summary_to_json",
    "target_to_json",
    "waiting_for_to_json",
]
