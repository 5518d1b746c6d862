"""The listing index: ``active.json`` and the ``index/<n>.json`` shards.

Why this shape: GitHub's GraphQL ``Blob.text`` is cut at 512,000 bytes, and the
first layout's ``index.json`` (every run's entry) passed that after a few hundred
runs. Now no file grows with the number of runs ever made:

* ``active.json`` holds the entries of the runs not finished (running,
  suspended, cancelling) — what a sweep reads, whatever the history — plus
  the index's cursor: the shard new runs are assigned to, its size, and the
  newest ``createdAt`` of the shards (the bounds a listing stops on).
* ``index/<n>.json`` holds finished runs' entries. A run is assigned a shard
  when it is created (the current one) and its entry lands there when it
  finishes. A new shard opens once the current one, with the active runs
  assigned to it, would pass :data:`SHARD_CAP` (200,000 bytes, well under the
  cut), so a shard never outgrows it.
* Each shard records ``olderNewest``, the newest ``createdAt`` of every older
  shard (fixed when it opens: older shards only ever receive runs created
  before). A listing reads ``active.json``, then shards newest first, and stops
  once it holds ``limit`` matches all newer than what older shards can hold.

Pure functions, no I/O; shards are read through a ``shard_of`` callable that
may raise :class:`~zuke_gh._branch_view.Missing`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from zuke._errors import CorruptRecordError
from zuke.state._protocol import RunQuery
from zuke.state._query import limited, matches, select, since_ms
from zuke.state.records import TERMINAL_STATUSES, RunRecord, RunSummary
from zuke_gh._branch_files import entry_record, parse_entries

ACTIVE_PATH = "active.json"
SHARD_DIR = "index"
#: A shard stops taking new runs past this many bytes (Blob.text is cut at 512,000).
SHARD_CAP = 200_000
LAYOUT = 2
ACTIVE_STATUSES = frozenset({"running", "suspended", "cancelling"})

Entry = Mapping[str, Any]


def shard_path(number: int) -> str:
    return f"{SHARD_DIR}/{number}.json"


@dataclass(frozen=True)
class Active:
    """``active.json``: the runs not finished, and the cursor of the shards."""

    shard: int = 1  #: the shard new runs are assigned to
    shard_bytes: int = 0  #: the size of that shard's file
    shard_newest: str = ""  #: the newest ``createdAt`` among that shard's entries
    older_newest: str = ""  #: the newest ``createdAt`` among every older shard's entries
    #: records may still be at the first layout's paths (a migrated branch)
    legacy_runs: bool = False
    runs: Mapping[str, Entry] = field(default_factory=dict)  #: id -> entry + its "shard"


@dataclass(frozen=True)
class Shard:
    number: int
    older_newest: str = ""
    runs: Mapping[str, Entry] = field(default_factory=dict)


# -- files -----------------------------------------------------------------------------------


def _lines(header: Mapping[str, Any], runs: Mapping[str, Entry]) -> bytes:
    """The header's keys, then ``runs`` one entry a line (readable diffs in ``git log -p``)."""
    head = json.dumps(dict(header), ensure_ascii=False)[:-1]
    body = ",\n".join(
        f"{json.dumps(k)}: {json.dumps(runs[k], ensure_ascii=False, separators=(',', ':'))}"
        for k in sorted(runs)
    )
    return f'{head}, "runs": {{\n{body}\n}}}}\n'.encode()


def entry_bytes(run_id: str, entry: Entry) -> int:
    """What one entry adds to an index file."""
    return (
        len(json.dumps(run_id))
        + 3
        + len(json.dumps(entry, ensure_ascii=False, separators=(",", ":")).encode())
    )


def active_bytes(active: Active) -> bytes:
    header = {"layout": LAYOUT, "shard": active.shard, "shardBytes": active.shard_bytes,
              "shardNewest": active.shard_newest, "olderNewest": active.older_newest,
              "legacyRuns": active.legacy_runs}  # fmt: skip
    return _lines(header, active.runs)


def shard_bytes(shard: Shard) -> bytes:
    return _lines({"shard": shard.number, "olderNewest": shard.older_newest}, shard.runs)


@lru_cache(maxsize=8)
def parse_active(text: str) -> Active:
    raw = parse_entries(text, ACTIVE_PATH)
    header = {k: raw.get(k) for k in ("shard", "shardBytes", "shardNewest", "olderNewest")}
    if not (
        isinstance(header["shard"], int)
        and isinstance(header["shardBytes"], int)
        and isinstance(header["shardNewest"], str)
        and isinstance(header["olderNewest"], str)
        and all(isinstance(e.get("shard"), int) for e in raw["runs"].values())
    ):
        raise CorruptRecordError(
            f"state: {ACTIVE_PATH} on the state branch lacks its shard cursor; "
            "it is zuke's own file: restore it from the branch's history"
        )
    return Active(
        shard=header["shard"],
        shard_bytes=header["shardBytes"],
        shard_newest=header["shardNewest"],
        older_newest=header["olderNewest"],
        legacy_runs=bool(raw.get("legacyRuns")),
        runs=raw["runs"],
    )


@lru_cache(maxsize=64)
def parse_shard(text: str | None, number: int) -> Shard:
    if text is None:
        return Shard(number)
    raw = parse_entries(text, shard_path(number))
    older = raw.get("olderNewest", "")
    return Shard(number, older if isinstance(older, str) else "", raw["runs"])


# -- placing an entry ------------------------------------------------------------------------


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


def _newest(*stamps: str) -> str:
    return max(stamps, default="")


def _assign(active: Active, additions: dict[str, bytes]) -> Active:
    """``active`` with a shard that can take one more run (opening a new one if full)."""
    assigned = sum(
        entry_bytes(k, e) for k, e in active.runs.items() if e.get("shard") == active.shard
    )
    if active.shard_bytes + assigned < SHARD_CAP:
        return active
    older = _newest(
        active.older_newest,
        active.shard_newest,
        *(str(e.get("createdAt", "")) for e in active.runs.values()),
    )
    number = active.shard + 1
    data = shard_bytes(Shard(number, older))
    additions[shard_path(number)] = data
    return replace(active, shard=number, shard_bytes=len(data), shard_newest="",
                   older_newest=older)  # fmt: skip


def place(
    active: Active,
    shard_of: Callable[[int], Shard],
    run_id: str,
    found_in: int | None,
    entry: Entry | None,
) -> dict[str, bytes]:
    """The index files to write so ``run_id``'s entry becomes ``entry`` (``None``: gone).

    ``found_in`` is the shard holding the run's finished entry, if any (the run
    is either there or in ``active``, never both).
    """
    additions: dict[str, bytes] = {}

    def load(number: int) -> Shard:  # a shard opened by this very step is in ``additions``
        made = additions.get(shard_path(number))
        return parse_shard(made.decode(), number) if made is not None else shard_of(number)

    runs = dict(active.runs)
    current = runs.pop(run_id, None)
    number = current["shard"] if current is not None else found_in
    cursor = active
    if entry is not None and number is None:
        cursor = _assign(active, additions)
        number = cursor.shard
    shard_runs: dict[str, Entry] | None = None
    if found_in is not None or (entry is not None and entry["status"] in TERMINAL_STATUSES):
        assert number is not None
        shard_runs = dict(load(number).runs)
        shard_runs.pop(run_id, None)
    if entry is not None and entry["status"] not in TERMINAL_STATUSES:
        runs[run_id] = {**entry, "shard": number}
    elif entry is not None and shard_runs is not None:
        shard_runs[run_id] = entry
    if shard_runs is not None:
        assert number is not None
        data = shard_bytes(Shard(number, load(number).older_newest, shard_runs))
        additions[shard_path(number)] = data
        if number == cursor.shard:
            newest = str(entry.get("createdAt", "")) if entry is not None else ""
            cursor = replace(cursor, shard_bytes=len(data),
                             shard_newest=_newest(cursor.shard_newest, newest))  # fmt: skip
    cursor = replace(cursor, runs=runs)
    if cursor != active:
        additions[ACTIVE_PATH] = active_bytes(cursor)
    return additions


# -- migration from the first layout ---------------------------------------------------------


def migrate(entries: Mapping[str, Entry]) -> dict[str, bytes]:
    """The new index files for the first layout's ``index.json`` entries.

    Finished runs fill shards oldest first (by ``createdAt``), each under the
    cap; the others go to ``active.json``, assigned to the last shard.
    """
    order = sorted(entries, key=lambda k: (str(entries[k].get("createdAt", "")), k))
    files: dict[str, bytes] = {}
    number, older, size = 1, "", 0
    shard: dict[str, Entry] = {}
    active: dict[str, Entry] = {}
    for run_id in order:
        entry = dict(entries[run_id])
        if entry.get("status") not in TERMINAL_STATUSES:
            active[run_id] = entry
            continue
        added = entry_bytes(run_id, entry)
        if shard and size + added >= SHARD_CAP:
            files[shard_path(number)] = shard_bytes(Shard(number, older, shard))
            older = _newest(older, *(str(e.get("createdAt", "")) for e in shard.values()))
            number, size, shard = number + 1, 0, {}
        shard[run_id] = entry
        size += added
    data = shard_bytes(Shard(number, older, shard))
    if shard or number > 1:  # an absent first shard is an empty one
        files[shard_path(number)] = data
    newest = _newest(*(str(e.get("createdAt", "")) for e in shard.values()))
    cursor = Active(
        shard=number,
        shard_bytes=len(data) if shard or number > 1 else 0,
        shard_newest=newest,
        older_newest=older,
        legacy_runs=bool(entries),
        runs={k: {**e, "shard": number} for k, e in active.items()},
    )
    files[ACTIVE_PATH] = active_bytes(cursor)
    return files


# -- listing ---------------------------------------------------------------------------------


def _records(entries: Mapping[str, Entry]) -> Iterable[RunRecord]:
    return (entry_record(k, {**e}) for k, e in entries.items())


def list_entries(
    active: Active, shard_of: Callable[[int], Shard], query: RunQuery
) -> list[RunSummary]:
    """The listing for ``query``: ``active.json``, then shards newest first while needed."""
    pool: dict[str, Entry] = {}
    if query.status is None or query.status in ACTIVE_STATUSES:
        pool.update(active.runs)
    if query.status in ACTIVE_STATUSES:
        return select(_records(pool), query)  # a sweep: active.json alone
    bound = _newest(active.shard_newest, active.older_newest)
    for number in range(active.shard, 0, -1):
        if _enough(pool, query, bound):
            break
        shard = shard_of(number)
        pool.update(shard.runs)
        bound = shard.older_newest
    return select(_records(pool), query)


def _enough(pool: Mapping[str, Entry], query: RunQuery, bound: str) -> bool:
    """Whether no entry created at or before ``bound`` can enter the answer."""
    if not bound:
        return True  # older shards hold nothing
    # (no shortcut on ``since``: the bound is the newest ``createdAt`` by text, the order a
    # listing sorts by, which is not an instant's order for stamps with offsets)
    floor = since_ms(query)
    limit = limited(query)
    if limit is None:
        return False
    if limit == 0:
        return True
    found = sorted(
        ((str(e.get("createdAt", "")), k) for k, e in pool.items()
         if matches(entry_record(k, {**e}), query, floor)),
        reverse=True,
    )  # fmt: skip
    return len(found) >= limit and found[limit - 1][0] > bound
