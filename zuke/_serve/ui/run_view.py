"""A run's page, as values: its targets, gates, fan-outs, locks, signals, compensations, events.

Built from the record (:class:`~zuke.state.records.RunRecord`) and the lock
listing of the run; nothing here is HTML. What never reaches a page: a lock's
token (the record's ``locks`` map keys to tokens: only the keys are kept) and
secrets (the engine never records a secret parameter, and masks every error,
state value and event before it writes them).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from zuke._clock import parse_iso
from zuke._serve.ui.gate_view import GateView, Link, environment_of, gate_view, target_links
from zuke._serve.ui.graph import Graph, item_of, item_status, layout, parent_of
from zuke.state._protocol import RUN_LEASE_PREFIX, LockEntry
from zuke.state.records import TARGET_STATUSES, RunRecord, TargetRecord

#: a JSON value shown on a page is cut after this many characters
MAX_JSON = 4000
MAX_EVENTS = 500
_ATTEMPTS = re.compile(r"\(after (\d+) attempts\)")
COMPENSATE_EVENTS = ("compensating", "compensate")


def shown_json(value: Any) -> str:
    """``value`` as indented JSON, cut at :data:`MAX_JSON` characters."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= MAX_JSON else text[:MAX_JSON] + "\n… (cut)"


@dataclass(frozen=True)
class EffectView:
    name: str
    status: str
    attempts: int
    error: str | None


@dataclass(frozen=True)
class TargetView:
    anchor: str
    name: str
    status: str
    started_at: str | None
    ended_at: str | None
    took_ms: int | None
    attempts: int | None
    error: str | None
    interrupted: bool
    meta: str | None  #: the target's recorded state as JSON (a gate's: see ``gate``)
    effects: tuple[EffectView, ...]
    environment: str | None
    links: tuple[Link, ...]
    gate: GateView | None


@dataclass(frozen=True)
class ItemView:
    key: str
    #: its stages' statuses, in the fan-out's ``stages`` order ("" where it has none)
    statuses: tuple[str, ...]
    #: the first failed stage's error
    error: str | None


@dataclass(frozen=True)
class FanOutView:
    parent: str
    anchor: str  #: the fan-out target's row
    stages: tuple[str, ...]
    items: tuple[ItemView, ...]
    counts: tuple[tuple[str, int], ...]  #: items by status (an item's from its stages')
    stage_counts: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class LockView:
    key: str
    role: str  #: "the run's lease", "held until publish (taken at staging)", "target lock"
    held_until: bool
    expires_at_ms: int | None
    fence: int | None


@dataclass(frozen=True)
class CompensationView:
    target: str
    compensation: str
    state: str  #: "done", "failed", "interrupted" (begun, never finished)
    at: str
    detail: str | None


@dataclass(frozen=True)
class RunView:
    record: RunRecord
    targets: tuple[TargetView, ...]
    waiting: tuple[GateView, ...]
    fan_outs: tuple[FanOutView, ...]
    graph: Graph
    locks: tuple[LockView, ...]
    signals: tuple[tuple[str, str, str | None, str], ...]  #: name, received, id, data JSON
    compensations: tuple[CompensationView, ...]
    events: tuple[Any, ...]
    events_left_out: int
    params: tuple[tuple[str, str], ...]
    counts: tuple[tuple[str, int], ...] = field(default=())


def _took(row: TargetRecord) -> int | None:
    start = parse_iso(row.started_at) if row.started_at else None
    end = parse_iso(row.ended_at) if row.ended_at else None
    return end - start if start is not None and end is not None and end >= start else None


def _attempts(row: TargetRecord) -> int | None:
    found = _ATTEMPTS.search(row.error or "")
    return int(found.group(1)) if found else None


def _split(record: RunRecord) -> tuple[list[str], dict[str, list[str]]]:
    """The targets a table lists — declared ones in plan order, then any the graph does not
    name — and each fan-out's sub-targets, in the order the record has them."""
    declared = {n.name: n for n in record.graph}
    subs: dict[str, list[str]] = {}
    loose: list[str] = []
    for name in record.targets:
        if name in declared:
            continue
        parent = parent_of(name, declared)
        if parent is None:
            loose.append(name)
        else:
            subs.setdefault(parent, []).append(name)
    return [*declared, *loose], subs


def _target(anchor: str, name: str, row: TargetRecord, record: RunRecord) -> TargetView:
    gate = gate_view(name, row, record)
    return TargetView(
        anchor=anchor, name=name, status=row.status, started_at=row.started_at,
        ended_at=row.ended_at, took_ms=_took(row), attempts=_attempts(row), error=row.error,
        interrupted=row.interrupted, meta=shown_json(dict(row.meta)) if row.meta else None,
        effects=tuple(EffectView(n, e.status, e.attempts, e.error) for n, e in row.effects.items()),
        environment=environment_of(row), links=tuple(target_links(row)), gate=gate,
    )  # fmt: skip


def _fan_out(parent: str, anchor: str, members: Sequence[str], record: RunRecord) -> FanOutView:
    stages: dict[str, None] = {}
    items: dict[str, dict[str, str]] = {}
    errors: dict[str, str] = {}
    for name in members:
        key = item_of(name, parent)
        stage = name[len(parent) + len(key) + 3 :]  # after "parent[key]."
        stages.setdefault(stage)
        row = record.targets[name]
        items.setdefault(key, {})[stage] = row.status
        if row.status == "failed" and row.error and key not in errors:
            errors[key] = row.error
    by_stage = Counter(record.targets[m].status for m in members)
    by_item = Counter(item_status(row.values()) for row in items.values())
    return FanOutView(
        parent=parent, anchor=anchor, stages=tuple(stages),
        items=tuple(ItemView(key, tuple(row.get(s, "") for s in stages), errors.get(key))
                    for key, row in items.items()),
        counts=tuple((s, by_item[s]) for s in TARGET_STATUSES if by_item[s]),
        stage_counts=tuple((s, by_stage[s]) for s in TARGET_STATUSES if by_stage[s]),
    )  # fmt: skip


def _locks(record: RunRecord, entries: Sequence[LockEntry]) -> tuple[LockView, ...]:
    listed = {e.key: e for e in entries}
    out = []
    for key in sorted(set(record.locks) | set(listed)):
        entry = listed.get(key)
        held = record.held.get(key)
        if key == RUN_LEASE_PREFIX + record.id:
            role = "the run's lease"
        elif held is not None:
            role = f"held until {held.until} has finished (taken at {held.target})"
        else:
            role = "a target's lock"
        fence = entry.fence if entry else (held.fence if held else None)
        expires = entry.expires_at if entry else None
        out.append(LockView(key, role, held is not None, expires, fence))
    return tuple(out)


def _compensations(record: RunRecord) -> tuple[CompensationView, ...]:
    rows: dict[tuple[str, str], CompensationView] = {}
    for e in record.events:
        if e.tool not in COMPENSATE_EVENTS:
            continue
        pair = (e.args.get("target", "?"), e.args.get("compensation", "?"))
        if e.tool == "compensating":
            state = "interrupted"  # until its ``compensate`` event says how it ended
        else:
            state = "done" if e.outcome == "ok" else "failed"
        rows[pair] = CompensationView(pair[0], pair[1], state, e.at, e.detail)
    return tuple(rows.values())


def run_view(record: RunRecord, entries: Sequence[LockEntry]) -> RunView:
    """The page of ``record``; ``entries`` are the lock listing's claims of the run."""
    listed, subs = _split(record)
    anchors = {name: f"t-{i}" for i, name in enumerate(listed)}
    targets = tuple(
        _target(anchors[name], name, record.targets.get(name) or TargetRecord(), record)
        for name in listed
    )
    fan_outs = tuple(_fan_out(p, anchors[p], subs[p], record) for p in listed if p in subs)
    events = record.events[-MAX_EVENTS:]
    counts = [(s, sum(1 for t in targets if t.status == s)) for s in TARGET_STATUSES]
    return RunView(
        record=record,
        targets=targets,
        waiting=tuple(_waiting(record)),
        fan_outs=fan_outs,
        graph=layout(record.graph, record.targets, anchors),
        locks=_locks(record, entries),
        signals=tuple(
            (name, s.received_at, s.id, shown_json(s.data))
            for name, s in sorted(record.signals.items())
        ),
        compensations=_compensations(record),
        events=tuple(events),
        events_left_out=len(record.events) - len(events),
        params=tuple(sorted(record.params.items())),
        counts=tuple((s, n) for s, n in counts if n),
    )


def _waiting(record: RunRecord) -> list[GateView]:
    """Every gate waiting now, a fan-out stage's included, in the record's order."""
    out = []
    for name, row in record.targets.items():
        if row.status == "waiting":
            gate = gate_view(name, row, record)
            if gate is not None:
                out.append(gate)
    return out


__all__ = [
    "CompensationView",
    "EffectView",
    "FanOutView",
    "ItemView",
    "LockView",
    "RunView",
    "TargetView",
    "run_view",
    "shown_json",
]
