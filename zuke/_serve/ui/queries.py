"""The runs page's rows: filters from the URL, keyset paging, and where each run is at.

Every filter the listing has an index for (status, build, since) is the
database's (:meth:`~zuke._serve.backend.ServeDb.list_runs`), and a page after
the first starts past the previous page's last row (``before``, keyset
paging), so a page costs in proportion to what it shows, wherever it is in
20,000 runs. The starter has no index: its filter reads the listing in chunks
and keeps the matches, at most :data:`SCAN_BUDGET` rows a page; a page that
reached the budget says how far back it looked and offers to look further.

Where a run is at (its waiting gates, its running targets, where it failed)
is in its record: the rows of runs that are not finished or that failed read
theirs, as JSON only (no full parse), so a page reads at most its own records
— and for at most :data:`READ_BUDGET_S`: rows past it say "open the run".
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from zuke._clock import parse_iso
from zuke._duration import parse_duration
from zuke._errors import CorruptRecordError, DurationError, UnsafeIdError
from zuke._serve.backend import Position, ServeDb, SummaryRow
from zuke._serve.schema import created_ms
from zuke.state._ids import check_id
from zuke.state.records import RUN_STATUSES

PAGE_SIZE = 50
#: rows the starter filter reads for one page, at most
SCAN_BUDGET = 5_000
SCAN_CHUNK = 500
#: the rows whose record is read for where the run is at
READ_AT = frozenset({"running", "suspended", "cancelling", "failed"})
#: a page reads records for this long at most
READ_BUDGET_S = 0.25
#: a value typed into a filter, at most this long
MAX_FILTER = 200


class BadQuery(ValueError):
    """A URL parameter the view cannot use; the message says which and what to do."""


@dataclass(frozen=True)
class RunsFilter:
    """The runs page's filters and place, as the URL gives them."""

    status: str | None = None
    build: str | None = None
    starter: str | None = None
    since: str | None = None  #: as typed: an instant, or a duration back from now
    before: Position | None = None

    def query(self, **changes: str | None) -> dict[str, str]:
        """The URL parameters of these filters (``before`` left out), with ``changes``."""
        out = {"status": self.status, "build": self.build, "starter": self.starter,
               "since": self.since}  # fmt: skip
        out.update(changes)
        return {k: v for k, v in out.items() if v}


def namespace(params: Mapping[str, str]) -> str:
    """The ``ns`` parameter: a namespace of the state API (``a/b``), empty for the root."""
    ns = params.get("ns", "").strip("/")
    if not ns:
        return ""
    try:
        for part in ns.split("/"):
            check_id(part, "namespace segment")
    except UnsafeIdError as exc:
        raise BadQuery(str(exc).removeprefix("state: ")) from None
    if len(ns.split("/")) > 8:
        raise BadQuery("namespace too deep: at most 8 segments")
    return ns


def _text(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name, "").strip()
    if len(value) > MAX_FILTER:
        raise BadQuery(f"{name} is longer than {MAX_FILTER} characters")
    return value or None


def parse_filter(params: Mapping[str, str]) -> RunsFilter:
    status = _text(params, "status")
    if status is not None and status not in RUN_STATUSES:
        raise BadQuery(f"status must be one of {', '.join(RUN_STATUSES)}")
    return RunsFilter(
        status=status,
        build=_text(params, "build"),
        starter=_text(params, "starter"),
        since=_text(params, "since"),
        before=parse_cursor(params.get("before", "")),
    )


def since_ms(since: str | None, now_ms: int) -> int | None:
    """``since`` as epoch ms: an ISO-8601 instant, or a duration back from now (``24h``)."""
    if since is None:
        return None
    at = created_ms(since)
    if at is not None:
        return at
    try:
        return now_ms - parse_duration(since, what="since")
    except DurationError:
        raise BadQuery(
            "since must be an ISO-8601 instant (2026-01-15T00:00:00Z) or a duration back "
            "from now (24h, 7d)"
        ) from None


def cursor(row: SummaryRow) -> str:
    """The ``before`` parameter of the page after ``row``: ``<created ms>:<id>``."""
    at = created_ms(row[5])
    return f"{'u' if at is None else at}:{row[0]}"


def parse_cursor(text: str) -> Position | None:
    if not text:
        return None
    at, sep, run_id = text.partition(":")
    try:
        check_id(run_id)
    except UnsafeIdError:
        sep = ""
    if sep and at == "u":
        return (None, run_id)
    if sep and at.isascii() and at.lstrip("-").isdigit() and len(at) < 20:
        return (int(at), run_id)
    raise BadQuery("before is not a place in the listing: follow the page's own links")


@dataclass(frozen=True)
class At:
    """Where a run is: a gate it waits at, a target running, the target that failed."""

    kind: str  #: "gate", "running", "failed"
    name: str
    detail: str = ""  #: a gate's trigger (``signal:approved``)


@dataclass(frozen=True)
class RunRow:
    id: str
    build: str
    root_target: str
    status: str
    starter: str
    created_at: str
    updated_at: str
    at: tuple[At, ...] = ()
    #: since when a suspended run has waited (epoch ms), from its ``parkedAt``
    parked_ms: int | None = None
    #: its record was not read (the page's time for records was spent)
    unread: bool = False


@dataclass(frozen=True)
class RunsPage:
    rows: list[RunRow]
    next_cursor: str | None  #: the ``before`` of the next page, if there may be one
    scanned_to: str | None = None  #: the starter filter stopped here (its budget)
    filters: RunsFilter = field(default_factory=RunsFilter)


def runs_page(db: ServeDb, ns: str, f: RunsFilter, *, now_ms: int) -> RunsPage:
    """One page of runs, newest first, with where each run is at."""
    since = since_ms(f.since, now_ms)

    def listing(limit: int, before: Position | None) -> list[SummaryRow]:
        return db.list_runs(ns, status=f.status, build=f.build, since_ms=since, limit=limit,
                            before=before)  # fmt: skip

    if f.starter is None:
        rows = listing(PAGE_SIZE + 1, f.before)
        more = len(rows) > PAGE_SIZE
        rows = rows[:PAGE_SIZE]
        return RunsPage(
            rows=_rows(db, ns, rows),
            next_cursor=cursor(rows[-1]) if more else None,
            filters=f,
        )
    wanted = f.starter.casefold()
    found: list[SummaryRow] = []
    place, scanned, last = f.before, 0, None
    exhausted = full = False
    while not full and scanned < SCAN_BUDGET:
        chunk = listing(SCAN_CHUNK, place)
        for row in chunk:
            scanned += 1
            last = row
            if row[4].casefold() == wanted:
                found.append(row)
                full = len(found) == PAGE_SIZE
                if full:
                    break
        if not full and len(chunk) < SCAN_CHUNK:
            exhausted = True
            break
        if last is not None:
            place = (created_ms(last[5]), last[0])
    more = not exhausted and last is not None
    return RunsPage(
        rows=_rows(db, ns, found),
        next_cursor=cursor(last) if more and last is not None else None,
        scanned_to=last[5] if more and not full and last is not None else None,
        filters=f,
    )


def _rows(db: ServeDb, ns: str, rows: list[SummaryRow]) -> list[RunRow]:
    """The page's rows; records are read for where each run is at until :data:`READ_BUDGET_S`
    is spent (a page of fifty suspended 1,000-target runs would take half a second), the
    rest shown without it."""
    deadline = time.monotonic() + READ_BUDGET_S
    return [_row(db, ns, r, read=time.monotonic() < deadline) for r in rows]


def _row(db: ServeDb, ns: str, row: SummaryRow, *, read: bool) -> RunRow:
    run_id, build, root, status, actor, created, updated = row
    at: tuple[At, ...] = ()
    parked: int | None = None
    unread = status in READ_AT and not read
    if status in READ_AT and read:
        try:
            stored = db.get_run(ns, run_id)
        except CorruptRecordError:  # its journal does not fold: the run's page says why
            stored = None
        if stored is not None:
            raw = _json(stored.text)
            at = where_at(raw, status)
            parked_at = raw.get("parkedAt")
            if status == "suspended" and isinstance(parked_at, str):
                parked = parse_iso(parked_at)
    return RunRow(id=run_id, build=build, root_target=root, status=status, starter=actor,
                  created_at=created, updated_at=updated, at=at, parked_ms=parked,
                  unread=unread)  # fmt: skip


def _json(text: str) -> dict[str, Any]:
    try:
        raw = json.loads(text)
    except ValueError:
        return {}
    return raw if isinstance(raw, dict) else {}


def where_at(raw: Mapping[str, Any], status: str) -> tuple[At, ...]:
    """Where a run is, from its record's JSON: the gates it waits at (suspended), the
    targets running (running, cancelling), or the first target that failed."""
    targets = raw.get("targets")
    if not isinstance(targets, dict):
        return ()
    if status == "suspended":
        wanted, kind = "waiting", "gate"
    elif status == "failed":
        wanted, kind = "failed", "failed"
    else:
        wanted, kind = "running", "running"
    found: list[tuple[str, At]] = []
    for name, row in targets.items():
        if not isinstance(row, dict) or row.get("status") != wanted:
            continue
        detail = ""
        waiting = row.get("waitingFor")
        if isinstance(waiting, dict) and isinstance(waiting.get("trigger"), str):
            detail = waiting["trigger"]
        when = row.get("endedAt") if kind == "failed" else row.get("startedAt")
        found.append((when if isinstance(when, str) else "", At(kind, str(name), detail)))
    found.sort(key=lambda pair: pair[0])
    if kind == "failed":
        return tuple(a for _, a in found[:1])
    return tuple(a for _, a in found)


__all__ = [
    "PAGE_SIZE",
    "At",
    "BadQuery",
    "RunRow",
    "RunsFilter",
    "RunsPage",
    "cursor",
    "namespace",
    "parse_cursor",
    "parse_filter",
    "runs_page",
    "since_ms",
    "where_at",
]
