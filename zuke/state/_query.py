"""``RunQuery`` semantics, shared by every in-tree store so they cannot drift apart.

Filters:

- ``status``: equality;
- ``target``: the name of a node of the run's graph;
- ``build``: equality with the record's ``build`` (the build class name);
- ``since``: ``createdAt >= since`` **as instants**, to the millisecond, so a
  fraction (``00:00:00.500Z``) or an offset (``+05:30``) compares by the time
  it names, not by its text. A record whose ``createdAt`` does not parse
  never matches a ``since`` filter (nothing shows it is recent enough), as
  ``runs prune`` never deletes one; a ``since`` that does not parse is an
  :class:`InvalidQueryError` (a ``StateError`` and a ``ValueError``).

Order: newest first by ``createdAt`` text, then by id, both descending (zuke and
the original write UTC stamps with milliseconds, whose text order is their time
order). ``limit`` applies after ordering; a negative limit counts as 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from zuke._clock import parse_iso
from zuke._errors import StateError
from zuke.state._protocol import RunQuery
from zuke.state.records import RunRecord, RunSummary


class InvalidQueryError(StateError, ValueError):
    """A :class:`RunQuery` that cannot be applied: a ``since`` that is no time."""


def since_ms(query: RunQuery) -> int | None:
    """``query.since`` as epoch ms (``None`` when unset); :class:`InvalidQueryError` if no time."""
    if query.since is None:
        return None
    parsed = parse_iso(query.since)
    if parsed is None:
        raise InvalidQueryError(
            f"state: since {query.since[:80]!r} is not an ISO-8601 time "
            "such as 2026-01-31T12:00:00Z"
        )
    return parsed


def created_ms(created_at: str) -> int | None:
    """A record's ``createdAt`` as epoch ms, ``None`` when it does not parse."""
    return parse_iso(created_at)


def matches(record: RunRecord, query: RunQuery, since: int | None = None) -> bool:
    """Whether ``record`` passes ``query``'s filters; ``since`` is :func:`since_ms` of it."""
    if query.status is not None and record.status != query.status:
        return False
    if query.build is not None and record.build != query.build:
        return False
    if query.target is not None and all(n.name != query.target for n in record.graph):
        return False
    floor = since_ms(query) if since is None else since
    if floor is None:
        return True
    created = created_ms(record.created_at)
    return created is not None and created >= floor


def limited(query: RunQuery) -> int | None:
    """How many results ``query`` allows (``None``: all)."""
    return None if query.limit is None else max(query.limit, 0)


def select(records: Iterable[RunRecord], query: RunQuery) -> list[RunSummary]:
    """The summaries of ``records`` that match ``query``, newest first, limited."""
    since = since_ms(query)
    found = [r for r in records if matches(r, query, since)]
    found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    limit = limited(query)
    if limit is not None:
        found = found[:limit]
    return [r.summary() for r in found]
