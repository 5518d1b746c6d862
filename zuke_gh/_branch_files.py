"""What the state branch holds, file by file, and how each file is written and read.

The layout (``docs/github-state.md``)::

    runs/<run id>.json   one run record (the published JSON shape) plus a write nonce
    index.json           every run's summary and graph names: a listing reads only this
    locks.json           every lock key's claim and fence, and the store-wide fence floor

A record's version is the git blob SHA of its file, computed here the way git
does (``sha1("blob <size>\\0" + bytes)``), so a write knows its new version
without asking GitHub. Each write puts a fresh random ``zukeWrite`` nonce in
the file: the same record written twice, or a run deleted and re-created,
never has the same version again (no ABA). Pure functions, no I/O.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zuke._errors import CorruptRecordError
from zuke.state.lock_rules import ClaimState
from zuke.state.records import GraphNode, RunRecord
from zuke.state.wire import holder_to_json, parse_holder, parse_record, record_to_json

RUNS_DIR = "runs"
INDEX_PATH = "index.json"
LOCKS_PATH = "locks.json"
#: The key of the write nonce in a record file; taken out before the record is parsed.
NONCE_KEY = "zukeWrite"


def run_path(run_id: str) -> str:
    return f"{RUNS_DIR}/{run_id}.json"


def blob_sha(data: bytes) -> str:
    """The git blob SHA-1 of ``data`` (what GitHub names the file's content)."""
    return hashlib.sha1(b"blob %d\x00" % len(data) + data, usedforsecurity=False).hexdigest()


def dump(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=False) + "\n").encode()


# -- records ---------------------------------------------------------------------------------


def record_bytes(record: RunRecord) -> bytes:
    """The file for ``record``, with a fresh nonce (so its blob SHA is new)."""
    return dump({NONCE_KEY: uuid.uuid4().hex, **record_to_json(record)})


def parse_record_file(text: str, run_id: str) -> RunRecord:
    where = f"run {run_id!r} ({run_path(run_id)} on the state branch)"
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(f"state: {where} is not valid JSON ({exc})") from None
    if isinstance(raw, dict):
        raw.pop(NONCE_KEY, None)
    return parse_record(raw, where=where)


# -- the index -------------------------------------------------------------------------------


def index_entry(record: RunRecord) -> dict[str, Any]:
    """What a listing needs of a run: its summary and the names in its graph."""
    return {
        "build": record.build,
        "rootTarget": record.root_target,
        "status": record.status,
        "actor": record.actor,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
        "graph": [n.name for n in record.graph],
    }


def entry_record(run_id: str, entry: Mapping[str, Any]) -> RunRecord:
    """A record carrying only what ``zuke.state._query`` filters on (from an index entry)."""
    where = f"{INDEX_PATH} entry {run_id!r} on the state branch"
    record = parse_record(
        {
            "id": run_id,
            **{k: entry.get(k) for k in ("build", "rootTarget", "status", "actor")},
            "createdAt": entry.get("createdAt"),
            "updatedAt": entry.get("updatedAt"),
        },
        where=where,
    )
    names = entry.get("graph") or []
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise CorruptRecordError(f'state: {where}: "graph" must be a list of names')
    return RunRecord(
        id=record.id,
        build=record.build,
        root_target=record.root_target,
        status=record.status,
        actor=record.actor,
        created_at=record.created_at,
        updated_at=record.updated_at,
        graph=tuple(GraphNode(n) for n in names),
    )


def parse_index(text: str | None) -> dict[str, dict[str, Any]]:
    if text is None:
        return {}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(
            f"state: {INDEX_PATH} on the state branch is not valid JSON ({exc})"
        ) from None
    runs = raw.get("runs") if isinstance(raw, dict) else None
    if not isinstance(runs, dict) or not all(isinstance(v, dict) for v in runs.values()):
        raise CorruptRecordError(
            f'state: {INDEX_PATH} on the state branch has no "runs" object of entries'
        )
    return runs


def index_bytes(entries: Mapping[str, Mapping[str, Any]]) -> bytes:
    return dump({"runs": {k: entries[k] for k in sorted(entries)}})


# -- locks -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockFile:
    """Every key's :class:`ClaimState` (a released key keeps its fence) and the fence floor."""

    claims: Mapping[str, ClaimState] = field(default_factory=dict)
    #: the highest fence of any key forgotten (a deleted run's lease): fences never go back
    fence_floor: int = 0


def parse_locks(text: str | None) -> LockFile:
    if text is None:
        return LockFile()
    where = f"state: {LOCKS_PATH} on the state branch"
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(f"{where} is not valid JSON ({exc})") from None
    claims_raw = raw.get("claims") if isinstance(raw, dict) else None
    floor = raw.get("fenceFloor", 0) if isinstance(raw, dict) else None
    if not isinstance(claims_raw, dict) or not isinstance(floor, int):
        raise CorruptRecordError(f'{where} needs a "claims" object and a whole "fenceFloor"')
    claims: dict[str, ClaimState] = {}
    for key, value in claims_raw.items():
        fence = value.get("fence") if isinstance(value, dict) else None
        if not isinstance(fence, int):
            raise CorruptRecordError(f'{where}: lock {key!r} has no whole "fence"')
        if value.get("token") is None:
            claims[key] = ClaimState(fence=fence)
            continue
        token, expires = value.get("token"), value.get("expiresAt")
        if not isinstance(token, str) or not isinstance(expires, int):
            raise CorruptRecordError(f'{where}: lock {key!r} needs a "token" and "expiresAt"')
        holder = parse_holder(value.get("holder"), where=f"{LOCKS_PATH} lock {key!r}")
        claims[key] = ClaimState(fence=fence, holder=holder, token=token, expires_at=expires)
    return LockFile(claims=claims, fence_floor=floor)


def locks_bytes(locks: LockFile) -> bytes:
    claims: dict[str, Any] = {}
    for key in sorted(locks.claims):
        state = locks.claims[key]
        entry: dict[str, Any] = {"fence": state.fence}
        if state.token is not None and state.holder is not None:
            entry.update(
                holder=holder_to_json(state.holder), token=state.token, expiresAt=state.expires_at
            )
        claims[key] = entry
    return dump({"fenceFloor": locks.fence_floor, "claims": claims})
