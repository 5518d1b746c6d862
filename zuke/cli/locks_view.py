"""Rendering ``zuke locks list``: a table like ``zuke runs list``, or JSON.

Keys, actors and run ids are text a client wrote, so the table escapes their
control characters (:func:`zuke.cli.runs_view.safe`) and the JSON is ASCII.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from zuke._clock import iso
from zuke.cli.runs_view import safe
from zuke.runs.locks import ListedLock, RunHeld
from zuke.state.wire import holder_to_json


def locks_table(locks: Sequence[ListedLock]) -> str:
    if not locks:
        return "No locks held."
    kept = any(listed.held is not None for listed in locks)
    rows = [("KEY", "ACTOR", "RUN", "SINCE", "EXPIRES", "FENCE", "HELD BY RUN" if kept else "")]
    for listed in locks:
        e = listed.entry
        expires = iso(e.expires_at) + (" (lapsed)" if listed.lapsed else "")
        held = safe(listed.held.describe()) if listed.held is not None else ("-" if kept else "")
        rows.append(
            (safe(e.key), safe(e.holder.actor), safe(e.holder.run_id), safe(e.holder.since),
             expires, str(e.fence), held)
        )  # fmt: skip
    last = 6 if kept else 5  # a run-held lock's run and gate, in a column of its own
    widths = [max(len(row[i]) for row in rows) for i in range(last)]
    return "\n".join(
        ("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:last])) + "  " + row[last])
        for row in rows
    )


def locks_json(locks: Sequence[ListedLock]) -> str:
    return json.dumps(
        [
            {
                "key": listed.entry.key,
                "holder": holder_to_json(listed.entry.holder),
                "expiresAt": iso(listed.entry.expires_at),
                "lapsed": listed.lapsed,
                "fence": listed.entry.fence,
                "heldByRun": None if listed.held is None else _held_json(listed.held),
            }
            for listed in locks
        ],
        indent=2,
    )


def _held_json(held: RunHeld) -> dict[str, object]:
    """A run-held lock (``held_until``): the run's status, its gates, and until which target."""
    return {
        "runStatus": held.run_status,
        "suspended": held.suspended,
        "gates": list(held.gates),
        "parkedAt": held.parked_at,
        "until": held.until,
    }
