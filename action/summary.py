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

Everything in the report and the records may quote what anyone wrote (a deny reason, a
comment, a name): it is escaped with zuke's own rules (``run_graph.inert``, zuke/_inert.py), so
nothing of it renders — no tag, link, image, emphasis or table break. A row links only to a URL
built here from checked parts: the gate's issue (and the deciding comment) or workflow run on
``GITHUB_SERVER_URL``, from the run's record, else the state branch's history — never to a URL
found in a reason. zuke redacted the report and the records before printing them. The summary
stays under ``SUMMARY_CAP_BYTES`` (GitHub drops a step's summary over 1 MiB whole): what does
not fit is left out from the end, and a last line says how many runs: ``N more: `zuke runs
list```.

It reads zuke's JSON output only (standard library, no zuke import but the rules' file), so it
runs under any Python the action set up.
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
inert = run_graph.inert
#: how much of a result's detail a row shows
CELL_CHARS = 300
SLUG = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
SERVER = re.compile(r"(?:https://[A-Za-z0-9.-]+|http://(?:127\.0\.0\.1|localhost))(?::[0-9]{1,5})?")
BRANCH = re.compile(r"[A-Za-z0-9_./-]+")
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


def server_url(env: dict[str, str]) -> str | None:
    """GitHub's web address (``GITHUB_SERVER_URL``, set by the runner), if it is plain."""
    server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    return server if SERVER.fullmatch(server) else None


def state_branch_link(env: dict[str, str]) -> str | None:
    """The state branch's history (its commits say what changed), for the branch store."""
    spec = urlsplit(env.get("ZUKE_STATE", ""))
    server = server_url(env)
    if spec.scheme != "github" or not spec.netloc or server is None:
        return None
    repo = f"{spec.netloc}{spec.path}".rstrip("/")
    branch = parse_qs(spec.query).get("branch", ["zuke-state"])[0]
    if not (SLUG.fullmatch(repo) and BRANCH.fullmatch(branch)) or ".." in branch:
        return None
    return f"{server}/{repo}/commits/{branch}"


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def gate_link(record: dict[str, Any] | None, gate: object, server: str | None) -> str | None:
    """GitHub's own page of what a gate waited on, built from the run's record: the approval
    issue (at the comment that decided it), or the workflow run it followed."""
    if record is None or server is None or not isinstance(gate, str):
        return None
    target = (record.get("targets") or {}).get(gate)
    meta = target.get("meta") if isinstance(target, dict) else None
    if not isinstance(meta, dict):
        return None
    repo, issue = meta.get("repo"), _int(meta.get("issue"))
    if isinstance(repo, str) and SLUG.fullmatch(repo) and issue is not None:
        issue_url = f"{server}/{repo}/issues/{issue}"
        comment = _deciding_comment(meta.get("decision"), issue_url)
        return issue_url + (f"#issuecomment-{comment}" if comment else "")
    run_id, followed = _int(meta.get("runId")), meta.get("runUrl")
    if run_id is not None and isinstance(followed, str):
        found = re.fullmatch(
            rf"{re.escape(server)}/({SLUG.pattern})/actions/runs/([0-9]+)", followed
        )
        if found and int(found.group(2)) == run_id:
            return f"{server}/{found.group(1)}/actions/runs/{run_id}"
    return None


def _deciding_comment(decision: object, issue_url: str) -> int | None:
    """The id of the comment that decided an approval, when its URL is on ``issue_url``."""
    if not isinstance(decision, dict):
        return None
    by = decision.get("deniedBy")
    approvers = decision.get("approvers")
    if not isinstance(by, dict) and isinstance(approvers, list) and approvers:
        by = approvers[-1]
    url = by.get("url") if isinstance(by, dict) else None
    found = re.fullmatch(rf"{re.escape(issue_url)}#issuecomment-([0-9]+)", url or "")
    return int(found.group(1)) if found else None


def cell(value: object) -> str:
    """Text a run wrote, as a table cell that renders as itself."""
    if value is None or value == "":
        return "—"
    return str(inert.summary_text(str(value), limit=CELL_CHARS))


def table(
    report: dict[str, Any] | None,
    status: int,
    env: dict[str, str],
    records: dict[str, dict[str, Any] | None] | None = None,
) -> str:
    """The job summary: the counts, then one row per run (uncapped: see :func:`compose`)."""
    head, rows = table_parts(report, status, env, records or {})
    return head + "".join(rows)


def table_parts(
    report: dict[str, Any] | None,
    status: int,
    env: dict[str, str],
    records: dict[str, dict[str, Any] | None],
) -> tuple[str, list[str]]:
    """The table's head (the counts, the header) and its rows, one per run."""
    if report is None:
        return (
            "### zuke sweep\n\n"
            f"`zuke resume --check` exited {status} without a report; see the step's log.\n"
        ), []
    values = outputs(report)
    head = ", ".join(f"{n} {name}" for name, n in values.items())
    lines = ["### zuke sweep", "", head, ""]
    runs = report.get("runs") or []
    if not runs:
        lines.append("No runs to check.")
        return "\n".join(lines) + "\n", []
    branch, server = state_branch_link(env), server_url(env)
    lines += ["| Run | Build | Gate | Action | Result | Link |", "|---|---|---|---|---|---|"]
    rows = []
    for run in runs:
        if not isinstance(run, dict):
            continue
        detail = run.get("detail") or ""
        result = run.get("result", "")
        if detail:
            result = f"{result}: {detail}"
        run_id = run.get("id")
        record = records.get(run_id) if isinstance(run_id, str) else None
        link = gate_link(record, run.get("gate"), server) or branch
        gate = run.get("gate")
        cells = [
            run_graph.code(str(run_id)) if run_id else "—",
            cell(run.get("build")),
            run_graph.code(gate) if isinstance(gate, str) and gate else "—",
            cell(run.get("action")),
            cell(result),
            inert.summary_link("link", link) if link else "—",
        ]
        rows.append("| " + " | ".join(cells) + " |\n")
    return "\n".join(lines) + "\n", rows


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


def touched(report: dict[str, Any] | None) -> list[str]:
    """The ids of the runs the sweep touched, once each, in its order."""
    ids: list[str] = []
    for run in (report or {}).get("runs") or []:
        run_id = run.get("id") if isinstance(run, dict) else None
        if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) and run_id not in ids:
            ids.append(run_id)
    return ids


def graph_parts(
    report: dict[str, Any] | None, records: dict[str, dict[str, Any] | None], limit: int
) -> tuple[str, list[str], str]:
    """The graphs' heading, one section per run drawn (the first ``limit`` touched, from
    ``records``), and the note for the runs beyond ``limit``."""
    ids = touched(report)
    if not ids or limit <= 0:
        return "", [], ""
    sections = []
    for run_id in ids[:limit]:
        record = records.get(run_id)
        if record is None:
            head = f"#### Run {run_graph.code(run_id, cell=False)}"
            sections.append(f"{head}\n\nIts record could not be read.\n\n")
        else:
            sections.append(run_graph.section(record) + "\n")
    note = ""
    if len(ids) > limit:
        note = (
            f"{len(ids) - limit} more runs not drawn: see the table above, or `zuke runs show`.\n"
        )
    return "\n### The runs it touched\n\n", sections, note


def graphs(report: dict[str, Any] | None, read: Reader, limit: int = GRAPHS) -> str:
    """Each run the sweep touched, its graph as mermaid and as a table (the first ``limit``;
    the rest in a note). Uncapped: see :func:`compose`."""
    records = {run_id: read(run_id) for run_id in touched(report)[: max(limit, 0)]}
    head, sections, note = graph_parts(report, records, limit)
    return head + "".join(sections) + note if sections else ""


def compose(
    report: dict[str, Any] | None,
    status: int,
    env: dict[str, str],
    records: dict[str, dict[str, Any] | None],
    limit: int,
    room: int,
) -> str:
    """The whole summary in at most ``room`` bytes: the table, then the graphs. What does not
    fit is left out from the end — rows first kept, then whole graphs — and the last line says
    how many runs it leaves unshown: ``N more: `zuke runs list```."""
    head, rows = table_parts(report, status, env, records)
    graph_head, sections, note = graph_parts(report, records, limit)
    drawn = graph_head + "".join(sections) + note if sections else ""
    whole = head + "".join(rows) + drawn
    if len(whole.encode()) <= room:
        return whole
    beyond = max(len(touched(report)) - max(limit, 0), 0)  # the runs no graph was due for

    def more(n: int) -> str:
        return f"\n{n} more: `zuke runs list`\n"

    table = str(inert.summary_fit(head, rows, room, more))
    if table != head + "".join(rows) or not sections:  # cut among the rows (or nothing fit)
        return table
    cut = str(inert.summary_fit(table + graph_head, sections, room, lambda n: more(n + beyond)))
    return cut or table


def _append(variable: str, text: str) -> None:
    path = os.environ.get(variable)
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(text)


def summary_room(variable: str) -> int:
    """What the step's summary file can still take under the cap."""
    try:
        used = Path(os.environ.get(variable, "")).stat().st_size
    except OSError:
        used = 0
    return int(inert.SUMMARY_CAP_BYTES) - used


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].lstrip("-").isdigit():
        print("usage: summary.py REPORT STATUS", file=sys.stderr)
        return 2
    status = int(argv[1])
    _, report = split_report(Path(argv[0]).read_text(encoding="utf-8", errors="replace"))
    values = outputs(report)
    _append("GITHUB_OUTPUT", "".join(f"{name}={n}\n" for name, n in values.items()))
    env = dict(os.environ)
    if os.environ.get("GITHUB_STEP_SUMMARY"):  # records are read only for a summary to write
        limit = graph_limit(env)
        records = {run_id: read_record(run_id, env) for run_id in touched(report)[:limit]}
        room = summary_room("GITHUB_STEP_SUMMARY")
        _append("GITHUB_STEP_SUMMARY", compose(report, status, env, records, limit, room))
    print(", ".join(f"{name}={n}" for name, n in values.items()))
    if status != 0:
        return status
    return 1 if values["failed"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
