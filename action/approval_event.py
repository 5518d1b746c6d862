"""Which run an ``issue_comment`` event asks the sweep to look at, before anything is installed.

``python3 approval_event.py`` (the runner's own Python, standard library only, no zuke) reads
``$GITHUB_EVENT_PATH`` and writes two step outputs to ``$GITHUB_OUTPUT``:

- ``sweep``: ``true`` when the comment was *created* on an open issue whose **body** carries the
  approval gate's marker, ``<!-- zuke-approval run=<id> gate=<name> commit=<sha> -->``, with a
  valid run id; ``false`` otherwise, and the action's later steps (Python, pip, the build) are
  skipped;
- ``run-id``: that run's id (``[A-Za-z0-9._-]``, at most 128 characters), which the sweep
  passes after ``--``.

Why the issue's body: zuke wrote it when it opened the approval issue. The comment's text is
never read; anyone can write anything there. A forged marker in someone else's issue body can
at worst make the sweep look at one run, whose gate then verifies every comment itself (the
issue recorded in the run, the commenter's role). Comments on pull requests are skipped: zuke
opens approval issues, and a gate on a named issue or pull request posts its marker in a
comment of its own, which the event does not carry (the schedule sweeps those). Comments on a
closed issue are skipped too: its gate has decided or timed out, or its run was pruned (a sweep
of a run no longer in the store would fail the job).

Nothing the event holds is printed (a printed ``::command::`` would reach the runner): only the
run id, once it is known to be made of safe characters, and the issue's number.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

MARKER = re.compile(r"<!-- zuke-approval run=(\S+) gate=(\S+) commit=(\S+) -->")
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")


def run_to_sweep(event: Any) -> tuple[str | None, str]:
    """The run an ``issue_comment`` event names through its issue's marker (or ``None``), and
    why, in words that quote nothing from the event."""
    if not isinstance(event, dict):
        return None, "the event payload is not a JSON object"
    if event.get("action") != "created":
        return None, "the comment was not created (edited or deleted): nothing to sweep"
    issue = event.get("issue")
    if not isinstance(issue, dict):
        return None, "the event has no issue"
    number = issue.get("number")
    where = f"#{number}" if isinstance(number, int) and not isinstance(number, bool) else "it"
    if issue.get("pull_request") is not None:
        return None, f"{where} is a pull request, not a zuke approval issue: nothing to sweep"
    if issue.get("state") == "closed":  # decided, timed out or pruned: the schedule sees to it
        return None, f"issue {where} is closed: nothing to sweep"
    body = issue.get("body")
    found = MARKER.search(body) if isinstance(body, str) else None
    if found is None:
        return None, f"issue {where} carries no zuke approval marker: nothing to sweep"
    run_id = unquote(found.group(1))
    if not RUN_ID.fullmatch(run_id) or set(run_id) == {"."}:
        return None, f"issue {where}'s approval marker names no valid run id: nothing to sweep"
    return run_id, f"a comment on issue {where}, the approval issue of run {run_id}: sweeping it"


def main(env: dict[str, str]) -> int:
    name = env.get("GITHUB_EVENT_NAME", "")
    if name != "issue_comment":
        print(f"zuke: a {name or 'non'}-comment event sweeps every run", file=sys.stderr)
        return _write(env, sweep=True, run_id="")
    path = env.get("GITHUB_EVENT_PATH", "")
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        print("zuke: cannot read the event payload (GITHUB_EVENT_PATH)", file=sys.stderr)
        return 2
    run_id, why = run_to_sweep(event)
    print(f"zuke: {why}")
    return _write(env, sweep=run_id is not None, run_id=run_id or "")


def _write(env: dict[str, str], *, sweep: bool, run_id: str) -> int:
    out = env.get("GITHUB_OUTPUT")
    if out:  # both values are safe: a fixed word and a checked id, neither with a newline
        with Path(out).open("a", encoding="utf-8") as file:
            file.write(f"sweep={'true' if sweep else 'false'}\nrun-id={run_id}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(dict(os.environ)))
