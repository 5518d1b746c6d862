"""The JSON form of one target row: status, meta, ``waitingFor`` and effects.

Split from :mod:`zuke.state.wire` (which owns the record as a whole and is
the module to import); the field reader every parser uses lives here too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from zuke._errors import CorruptRecordError
from zuke.state.records import (
    TARGET_STATUSES,
    EffectRecord,
    EffectStatus,
    TargetRecord,
    TargetStatus,
    WaitingFor,
)


def optional(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def waiting_for_to_json(w: WaitingFor) -> dict[str, Any]:
    out: dict[str, Any] = {"trigger": w.trigger}
    optional(out, "deadline", w.deadline)
    out["onTimeout"] = {"target": w.on_timeout} if w.on_timeout_is_target else w.on_timeout
    optional(out, "checkedAt", w.checked_at)
    optional(out, "detail", w.detail)
    optional(out, "failed", w.failed)
    return out


def _effect_to_json(e: EffectRecord) -> dict[str, Any]:
    out: dict[str, Any] = {"status": e.status, "attempts": e.attempts}
    optional(out, "intentAt", e.intent_at)
    optional(out, "doneAt", e.done_at)
    optional(out, "error", e.error)
    return out


def target_to_json(t: TargetRecord) -> dict[str, Any]:
    out: dict[str, Any] = dict(t.extra)
    out["status"] = t.status
    out["meta"] = dict(t.meta)
    optional(out, "startedAt", t.started_at)
    optional(out, "endedAt", t.ended_at)
    optional(out, "error", t.error)
    if t.waiting_for is not None:
        out["waitingFor"] = waiting_for_to_json(t.waiting_for)
    if t.effects:
        out["effects"] = {name: _effect_to_json(e) for name, e in t.effects.items()}
    if t.interrupted:
        out["interrupted"] = True
    optional(out, "environment", t.environment)
    optional(out, "environmentUrl", t.environment_url)
    return out


_TARGET_KEYS = frozenset(
    {
        "status",
        "meta",
        "startedAt",
        "endedAt",
        "error",
        "waitingFor",
        "effects",
        "interrupted",
        "environment",
        "environmentUrl",
    }
)


class Reader:
    """Typed field access that names the offending field on failure."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, what: str) -> CorruptRecordError:
        return CorruptRecordError(
            f"state: {self.where}: {what}; zuke leaves it as it is: restore the record from a "
            "copy or fix that field, then retry"
        )

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


def _parse_waiting_for(rd: Reader, raw: Any) -> WaitingFor:
    obj = rd.obj(raw, "waitingFor")
    on_timeout = obj.get("onTimeout", "fail")
    is_target = isinstance(on_timeout, dict) and isinstance(on_timeout.get("target"), str)
    if is_target:
        on_timeout = on_timeout["target"]
    elif on_timeout not in ("fail", "cancel-run"):
        raise rd.fail('"onTimeout" must be "fail", "cancel-run" or {"target": name}')
    return WaitingFor(
        trigger=rd.string(obj, "trigger"),
        deadline=rd.opt_string(obj, "deadline"),
        on_timeout=on_timeout,
        on_timeout_is_target=is_target,
        checked_at=rd.opt_string(obj, "checkedAt"),
        detail=rd.opt_string(obj, "detail"),
        failed=rd.opt_string(obj, "failed"),
    )


def _parse_effects(rd: Reader, raw: Any) -> dict[str, EffectRecord]:
    out = {}
    for name, value in rd.obj(raw, "effects").items():
        obj = rd.obj(value, f"effect {name!r}")
        attempts = obj.get("attempts", 1)
        if not isinstance(attempts, int) or isinstance(attempts, bool) or attempts < 0:
            raise rd.fail(f'effect {name!r}: "attempts" must be a whole number')
        out[name] = EffectRecord(
            status=cast(EffectStatus, rd.status(obj, "status", ("pending", "done", "failed"))),
            intent_at=rd.opt_string(obj, "intentAt"),
            attempts=attempts,
            done_at=rd.opt_string(obj, "doneAt"),
            error=rd.opt_string(obj, "error"),
        )
    return out


def parse_target(raw: Any, where: str) -> TargetRecord:
    rd = Reader(where)
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
        effects={} if obj.get("effects") is None else _parse_effects(rd, obj["effects"]),
        interrupted=obj.get("interrupted") is True,
        environment=rd.opt_string(obj, "environment"),
        environment_url=rd.opt_string(obj, "environmentUrl"),
        extra={k: v for k, v in obj.items() if k not in _TARGET_KEYS},
    )
