"""What the state branch holds, file by file, and how each file is written and read.

The layout (``docs/github-state.md``)::

    README.md               what the branch is; written once, when the branch is created
    active.json             the runs not finished (their listing entries) and the index's cursor
    index/<n>.json          finished runs' listing entries, in shards capped well under the
                            512,000 bytes GraphQL's Blob.text answers (``_branch_index``)
    locks.json              live lock keys' claims and fences, and the store-wide fence floor
    runs/<hh>/<run id>.json one run record (the published JSON shape) plus a write nonce;
                            ``hh`` is a hash prefix of the id, so no directory passes GitHub's
                            recommended 3,000 entries

The first layout (``index.json`` and ``runs/<run id>.json``) is still read: a
store migrates its index on its next write, and reads a record at its old path
until a write moves it.

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
README_PATH = "README.md"
LOCKS_PATH = "locks.json"
#: The first layout's index (every run's entry in one file): read to migrate, then deleted.
LEGACY_INDEX_PATH = "index.json"
#: The key of the write nonce in a record file; taken out before the record is parsed.
NONCE_KEY = "zukeWrite"

README_TEXT = """# zuke run state

This branch holds the run records and locks of [zuke](https://pypi.org/project/zuke/)
releases of this repository. zuke writes it through GitHub's API, one commit per change;
`git log` of this branch is an audit trail.

**Do not edit, rebase, force-push or delete this branch by hand.** A run that is waiting
(suspended at a gate) or holding a lock lives only here: deleting the branch loses it.
zuke refuses to re-create a deleted branch over lost state.

To look at what it holds:

```sh
export ZUKE_STATE='github://OWNER/REPO?branch=BRANCH'
zuke runs list            # newest first
zuke runs show RUN_ID
zuke locks list
```
"""


def run_path(run_id: str) -> str:
    """Where a run's record lives: under a two-hex-digit prefix of the id's SHA-1, so 256
    directories share the runs (GitHub recommends at most 3,000 entries a directory)."""
    prefix = hashlib.sha1(run_id.encode(), usedforsecurity=False).hexdigest()[:2]
    return f"{RUNS_DIR}/{prefix}/{run_id}.json"


def legacy_run_path(run_id: str) -> str:
    """Where the first layout kept a run's record (read until a write moves it)."""
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


def parse_record_file(text: str, run_id: str, path: str | None = None) -> RunRecord:
    where = f"run {run_id!r} ({path or run_path(run_id)} on the state branch)"
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(f"state: {where} is not valid JSON ({exc})") from None
    if isinstance(raw, dict):
        raw.pop(NONCE_KEY, None)
    return parse_record(raw, where=where)


# -- index entries -------------------------------------------------------------------------------


def entry_record(run_id: str, entry: Mapping[str, Any]) -> RunRecord:
    """A record carrying only what ``zuke.state._query`` filters on (from an index entry)."""
    where = f"the index entry of {run_id!r} on the state branch"
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


def parse_entries(text: str | None, path: str) -> dict[str, Any]:
    """An index file's JSON object, whose ``runs`` maps run ids to entries."""
    if text is None:
        return {"runs": {}}
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise CorruptRecordError(
            f"state: {path} on the state branch is not valid JSON ({exc})"
        ) from None
    runs = raw.get("runs") if isinstance(raw, dict) else None
    if not isinstance(runs, dict) or not all(isinstance(v, dict) for v in runs.values()):
        raise CorruptRecordError(
            f'state: {path} on the state branch has no "runs" object of entries'
        )
    assert isinstance(raw, dict)
    return raw


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
