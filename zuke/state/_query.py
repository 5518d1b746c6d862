"""``RunQuery`` semantics, shared by every in-tree store so they cannot drift apart.

Filters: ``status`` equality, ``target`` = the name of a graph node, ``since``
= ``createdAt >= since`` compared as strings (ISO-8601 UTC stamps of one shape
sort chronologically). Order: newest first by ``createdAt``, then by id, both
descending. ``limit`` applies after ordering; a negative limit counts as 0.
"""

from __future__ import annotations

from collections.abc import Iterable

from zuke.state._protocol import RunQuery
from zuke.state.records import RunRecord, RunSummary


def matches(record: RunRecord, query: RunQuery) -> bool:
    if query.status is not None and record.status != query.status:
        return False
    if query.target is not None and all(n.name != query.target for n in record.graph):
        return False
    return query.since is None or record.created_at >= query.since


def select(records: Iterable[RunRecord], query: RunQuery) -> list[RunSummary]:
    """The summaries of ``records`` that match ``query``, newest first, limited."""
    found = [r for r in records if matches(r, query)]
    found.sort(key=lambda r: (r.created_at, r.id), reverse=True)
    if query.limit is not None:
        found = found[: max(query.limit, 0)]
    return [r.summary() for r in found]
