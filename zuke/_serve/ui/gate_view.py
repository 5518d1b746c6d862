"""What a gate waits for, and the links a target's record holds, read from the record alone.

The view cannot import the triggers (``zuke_gh`` is above ``zuke``, the engine
above the service), so it reads what they record: ``waitingFor.trigger``
(``signal:NAME``, ``github:OWNER/REPO:WORKFLOW``,
``github-approval:OWNER/REPO``, ``predicate``), the last check's ``detail``,
and the gate's own state (``meta``): ``runId`` / ``runUrl`` of a dispatched
workflow, ``issueUrl`` and ``approvers`` of an approval, its ``decision``.
Anything else a trigger writes is shown as its state's JSON.

Links are drawn only for ``http``/``https`` URLs: a record may hold any text,
``javascript:`` included.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from zuke._clock import parse_iso
from zuke.state.records import RunRecord, TargetRecord

MAX_URL = 2048


@dataclass(frozen=True)
class Link:
    label: str
    url: str


@dataclass(frozen=True)
class Approver:
    login: str
    role: str
    at: str
    url: str | None


@dataclass(frozen=True)
class GateView:
    name: str
    trigger: str
    #: what it waits for, in words ("the signal 'approved'")
    waits_for: str
    signal: str | None
    #: the signal's arrival, when it came and a resume has not continued the run yet
    signal_received: str | None
    detail: str | None
    checked_at: str | None
    deadline: str | None
    deadline_ms: int | None
    on_timeout: str
    failed: str | None
    approvers: tuple[Approver, ...]
    decision: str | None
    workflow_run: str | None
    links: tuple[Link, ...]


def safe_url(value: object) -> str | None:
    """``value`` if it is an absolute http(s) URL without spaces or controls, else ``None``."""
    if not isinstance(value, str) or len(value) > MAX_URL:
        return None
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        return None
    try:
        parts = urlsplit(value)
    except ValueError:
        return None
    return value if parts.scheme in ("http", "https") and parts.netloc else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def describe_trigger(trigger: str) -> tuple[str, str | None]:
    """``(what it waits for, the signal's name or None)`` of a ``waitingFor.trigger``."""
    kind, _, rest = trigger.partition(":")
    if kind == "signal" and rest:
        return f"the signal {rest!r}", rest
    if kind == "github" and rest:
        repo, _, workflow = rest.rpartition(":")
        return f"the workflow {workflow or rest} in {repo or '?'}", None
    if kind == "github-approval":
        return f"approval in a GitHub issue of {rest or 'the repository'}", None
    if trigger == "predicate":
        return "a predicate of the build (checked by each sweep)", None
    return trigger, None


def _on_timeout(target: TargetRecord) -> str:
    waiting = target.waiting_for
    if waiting is None:
        return ""
    if waiting.on_timeout_is_target:
        return f"run the target {waiting.on_timeout!r}"
    return {"fail": "fail the gate", "cancel-run": "cancel the run"}.get(
        waiting.on_timeout, waiting.on_timeout
    )


def _approvers(meta: Mapping[str, Any]) -> tuple[Approver, ...]:
    decision = meta.get("decision")
    rows = meta.get("approvers")
    if isinstance(decision, dict) and isinstance(decision.get("approvers"), list):
        rows = decision["approvers"]
    out = []
    for row in rows if isinstance(rows, list) else []:
        if isinstance(row, dict) and _text(row.get("login")):
            role, at = _text(row.get("role")) or "", _text(row.get("at")) or ""
            out.append(Approver(str(row["login"]), role, at, safe_url(row.get("url"))))
    return tuple(out)


def _decision(meta: Mapping[str, Any]) -> str | None:
    decision = meta.get("decision")
    if not isinstance(decision, dict):
        return None
    if decision.get("approved") is True:
        return "approved"
    denied = decision.get("deniedBy")
    who = _text(denied.get("login")) if isinstance(denied, dict) else None
    reason = _text(decision.get("reason"))
    return "denied" + (f" by {who}" if who else "") + (f": {reason}" if reason else "")


def gate_view(name: str, target: TargetRecord, record: RunRecord) -> GateView | None:
    """The gate ``name`` as the record has it (``None``: the target is not a gate)."""
    waiting = target.waiting_for
    if waiting is None:
        return None
    waits_for, signal = describe_trigger(waiting.trigger)
    received = record.signals.get(signal) if signal is not None else None
    meta = target.meta
    run_id = meta.get("runId")
    return GateView(
        name=name,
        trigger=waiting.trigger,
        waits_for=waits_for,
        signal=signal,
        signal_received=received.received_at if received is not None else None,
        detail=waiting.detail,
        checked_at=waiting.checked_at,
        deadline=waiting.deadline,
        deadline_ms=parse_iso(waiting.deadline) if waiting.deadline else None,
        on_timeout=_on_timeout(target),
        failed=waiting.failed,
        approvers=_approvers(meta),
        decision=_decision(meta),
        workflow_run=str(run_id) if isinstance(run_id, int | str) and run_id != "" else None,
        links=tuple(target_links(target)),
    )


#: keys of a target's record (its own fields, or its ``meta``) that hold a link, and its label
_LINK_KEYS = {
    "issueUrl": "approval issue",
    "runUrl": "workflow run",
    "environmentUrl": "environment",
    "environment_url": "environment",
    "deploymentUrl": "deployment",
    "logUrl": "deployment log",
    "log_url": "deployment log",
}
#: keys whose value is an object (or a list of them) with links of its own
_NESTED = ("environment", "deployment", "deployments")


def _links_in(obj: Mapping[str, Any], prefix: str = "") -> Iterable[Link]:
    for key, label in _LINK_KEYS.items():
        url = safe_url(obj.get(key))
        if url is not None:
            yield Link(f"{prefix}{label}", url)
    for key in ("url", "htmlUrl", "html_url"):
        url = safe_url(obj.get(key))
        if url is not None and prefix:
            yield Link(prefix.strip(), url)


def target_links(target: TargetRecord) -> list[Link]:
    """Every http(s) link the target's record holds (its own fields first, then ``meta``),
    each URL once: an approval's issue, a workflow run, an environment and its deployment."""
    found: list[Link] = []
    own = safe_url(target.environment_url)
    if own is not None:
        found.append(Link("environment", own))
    if not target.extra and not target.meta:
        return found
    for source in (target.extra, target.meta):
        found += _links_in(source)
        for key in _NESTED:
            value = source.get(key)
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    found += _links_in(item, prefix=f"{key.rstrip('s')} ")
    seen: set[str] = set()
    unique = []
    for link in found:
        if link.url not in seen:
            seen.add(link.url)
            unique.append(link)
    return unique


def environment_of(target: TargetRecord) -> str | None:
    """The environment a target deploys to, if its record names one (Step 16's field;
    a record from before it kept the field may carry it in ``meta``)."""
    if target.environment:
        return target.environment
    if not target.extra and not target.meta:
        return None
    for source in (target.extra, target.meta):
        value = source.get("environment")
        if isinstance(value, str) and value:
            return value
        if isinstance(value, dict):
            name = value.get("name") or value.get("environment")
            if isinstance(name, str) and name:
                return name
    return None


__all__ = [
    "Approver",
    "GateView",
    "Link",
    "describe_trigger",
    "environment_of",
    "gate_view",
    "safe_url",
    "target_links",
]
