"""Rendering ``zuke locks list``: a table like ``zuke runs list``, or JSON.

Keys, actors and run ids are text a client wrote, so the table escapes their
control characters (:func:`zuke.cli.runs_view.safe`) and the JSON is ASCII.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from zuke._clock import iso
from zuke.cli.runs_view import safe
from zuke.runs.locks import ListedLock
from zuke.state.wire import holder_to_json


def locks_table(locks: Sequence[ListedLock]) -> str:
    if not locks:
        return "No locks held."
    rows = [("KEY", "ACTOR", "RUN", "SINCE", "EXPIRES", "FENCE")]
    for listed in locks:
        e = listed.entry
        expires = iso(e.expires_at) + (" (lapsed)" if listed.lapsed else "")
        rows.append(
            (safe(e.key), safe(e.holder.actor), safe(e.holder.run_id), safe(e.holder.since),
             expires, str(e.fence))
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row[:5])) + "  " + row[5]
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
            }
            for listed in locks
        ],
        indent=2,
    )
