"""The sweep step's outputs and job summary, from ``zuke resume --check --json``.

``python summary.py REPORT STATUS``: REPORT holds a copy of the sweep's stdout (the step
tees it, so the log already has it as it was printed), STATUS its exit code. The counts go to
``$GITHUB_OUTPUT`` (``checked``, ``resumed``, ``still-waiting``, ``failed``, ``deferred``)
and a table with one row per run to ``$GITHUB_STEP_SUMMARY``, both before this exits non-zero
for a sweep that failed. A resumed run's bodies print to the same stdout, ahead of the report:
the report is the last JSON object in it.

Below the table, each run the sweep touched (the first ``ZUKE_SUMMARY_GRAPHS``, the action's
``graphs`` input: 10 unless set, at most :data:`MAX_GRAPHS`, 0 for none) gets its graph as a
mermaid flowchart and as a table (``run_graph.py``), from its record as
``python -m zuke runs show RUN --json`` prints it: one record read per run, in the same store
and with the same build file as the sweep. A record that cannot be read is one line saying so;
the outputs and the step's verdict never depend on it.

It reads zuke's JSON output only (standard library, no zuke import), so it runs under any
Python the action set up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import run_graph  # action/run_graph.py: this script's directory is first on sys.path

OUTPUTS = {
    "checked": "checked",
    "resumed": "resumed",
    "still-waiting": "still_waiting",
    # a sweep out of GitHub write budget leaves satisfied runs for the next one (not failed);
    # an older zuke's report has no such count: 0
    "deferred": "deferred",
}
ORDER = ("checked", "resumed", "still-waiting", "failed", "deferred")
URL = re.compile(r"https?://[^\s)\"'<>|]+")
#: runs whose graph the summary draws unless ZUKE_SUMMARY_GRAPHS says otherwise, and the most
#: it may say; the rest are counted in a note
GRAPHS = 10
MAX_GRAPHS = 50
#: a record read (``zuke runs show``) that takes longer is given up on
READ_SECONDS = 120
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,128}")

Reader = Callable[[str], "dict[str, Any] | None"]


def split_report(text: str, key: str = "counts") -> tuple[str, dict[str, Any] | None]:
    """The text ahead of the report, and the report (``None`` if the text holds none): the
    last JSON object that starts a line and has ``key``."""
    starts = [m.start() for m in re.finditer(r"^\{", text, flags=re.MULTILINE)]
    for start in reversed(starts):
        try:
            found = json.loads(text[start:])
        except ValueError:
            continue
        wanted = isinstance(found, dict) and key in found
        if wanted and (key != "counts" or isinstance(found["counts"], dict)):
            return text[:start], found
    return text, None


def outputs(report: dict[str, Any] | None) -> dict[str, int]:
    """The action's outputs; a sweep that produced no report counts as one failure."""
    counts = report["counts"] if report else {}
    values = {name: int(counts.get(key, 0)) for name, key in OUTPUTS.items()}
    values["failed"] = int(counts.get("failed", 0)) if report else 1
    return {name: values[name] for name in ORDER}


def state_branch_link(env: dict[str, str]) -> str | None:
    """The state branch's history (its commits say what changed), for the branch store."""
    spec = urlsplit(env.get("ZUKE_STATE", ""))
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    if spec.scheme != "github" or not spec.netloc:
        return None
    branch = parse_qs(spec.query).get("branch", ["zuke-state"])[0]
    return f"{server}/{spec.netloc}{spec.path}/commits/{branch}"


def cell(value: object) -> str:
    text = "—" if value is None or value == "" else str(value)
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def table(report: dict[str, Any] | None, status: int, env: dict[str, str]) -> str:
    """The job summary: the counts, then one row per run."""
    if report is None:
        return (
            "### zuke sweep\n\n"
            f"`zuke resume --check` exited {status} without a report; see the step's log.\n"
        )
    values = outputs(report)
    head = ", ".join(f"{n} {name}" for name, n in values.items())
    lines = ["### zuke sweep", "", head, ""]
    runs = report.get("runs") or []
    if not runs:
        lines.append("No runs to check.")
        return "\n".join(lines) + "\n"
    branch = state_branch_link(env)
    lines += ["| Run | Build | Gate | Action | Result | Link |", "|---|---|---|---|---|---|"]
    for run in runs:
        detail = run.get("detail") or ""
        result = run.get("result", "")
        if detail:
            result = f"{result}: {detail}"
        url = URL.search(detail)
        link = url.group(0) if url else branch
        lines.append(
            "| "
            + " | ".join(
                [
                    f"`{cell(run.get('id'))}`",
                    cell(run.get("build")),
                    cell(run.get("gate")),
                    cell(run.get("action")),
                    cell(result),
                    f"[link]({link})" if link else "—",
                ]
            )
            + " |"
        )
    return "\n".join(lines) + "\n"


def read_record(run_id: str, env: dict[str, str]) -> dict[str, Any] | None:
    """``zuke runs show RUN --json`` in the sweep's store, with its build file (``None`` if it
    fails: the summary says so and goes on)."""
    file_args = ["--file", env["ZUKE_BUILD_FILE"]] if env.get("ZUKE_BUILD_FILE") else []
    command = [sys.executable, "-m", "zuke", *file_args, "runs", "show", "--json", "--", run_id]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=READ_SECONDS, check=False, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    _, record = split_report(done.stdout, key="graph")
    return record if record is not None and record.get("id") == run_id else None


def graph_limit(env: dict[str, str]) -> int:
    """How many runs to draw: ``ZUKE_SUMMARY_GRAPHS`` (whole digits), else :data:`GRAPHS`."""
    text = env.get("ZUKE_SUMMARY_GRAPHS", "").strip()
    if not (text.isascii() and text.isdigit()):
        return GRAPHS
    return min(int(text), MAX_GRAPHS)


def graphs(report: dict[str, Any] | None, read: Reader, limit: int = GRAPHS) -> str:
    """Each run the sweep touched, its graph as mermaid and as a table (the first ``limit``;
    the rest in a note)."""
    ids: list[str] = []
    for run in (report or {}).get("runs") or []:
        run_id = run.get("id") if isinstance(run, dict) else None
        if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) and run_id not in ids:
            ids.append(run_id)
    if not ids or limit <= 0:
        return ""
    parts = ["", "### The runs it touched", ""]
    for run_id in ids[:limit]:
        record = read(run_id)
        if record is None:
            parts += [f"#### Run {run_graph.code(run_id)}", "", "Its record could not be read.", ""]
        else:
            parts.append(run_graph.section(record))
    if len(ids) > limit:
        more = len(ids) - limit
        parts.append(f"{more} more runs not drawn: see the table above, or `zuke runs show`.\n")
    return "\n".join(parts)


def _append(variable: str, text: str) -> None:
    path = os.environ.get(variable)
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(text)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].lstrip("-").isdigit():
        print("usage: summary.py REPORT STATUS", file=sys.stderr)
        return 2
    status = int(argv[1])
    _, report = split_report(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    values = outputs(report)
    _append("GITHUB_OUTPUT", "".join(f"{name}={n}\n" for name, n in values.items()))
    env = dict(os.environ)
    text = table(report, status, env)
    if os.environ.get("GITHUB_STEP_SUMMARY"):  # records are read only for a summary to write
        text += graphs(report, lambda run_id: read_record(run_id, env), graph_limit(env))
    _append("GITHUB_STEP_SUMMARY", text)
    print(", ".join(f"{name}={n}" for name, n in values.items()))
    if status != 0:
        return status
    return 1 if values["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
