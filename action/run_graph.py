"""A run's graph for the sweep's job summary: a mermaid flowchart and the same as a table.

:func:`section` takes a run record as ``zuke runs show RUN --json`` prints it (its ``graph``:
each planned target with the targets it depends on; its ``targets``: each one's status) and
returns markdown: a heading, a ``flowchart`` whose nodes carry a status mark and a colour
class (succeeded ✔, failed ✖, waiting ⏸, pending …), and a plain table for viewers that do not
render mermaid. A fan-out's items (``parent[item].stage``) are counted on their parent's node.

Names come from a build, so nothing of them reaches mermaid or markdown raw: a node's id is
its index (``t0``), its label keeps letters, digits and a few punctuation marks and writes every
other character as a mermaid entity code (``#34;``), so no name can close the label, the code
fence or the chart; in the table a name is a code span with its backticks and pipes replaced.

The markdown rules are zuke's own (:mod:`zuke._inert`), loaded by path from this action's
checkout (``../zuke/_inert.py``: standard library only) as :data:`inert`, so the summary
escapes text exactly as ``zuke`` does whichever zuke version the action installed; an action
copied without its repository uses the installed zuke's. Standard library only, like
``summary.py``.
"""

from __future__ import annotations

import importlib.util
import re
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any


def _rules() -> ModuleType:
    """``zuke/_inert.py`` of this checkout, else of the installed zuke."""
    path = Path(__file__).resolve().parent.parent / "zuke" / "_inert.py"
    spec = importlib.util.spec_from_file_location("zuke_action_inert", path)
    if not path.is_file() or spec is None or spec.loader is None:
        import zuke._inert

        return zuke._inert
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


#: the rules for untrusted text in the summary (``summary_text``, ``summary_code``, …)
inert = _rules()

#: targets drawn (and rows listed) per run; the rest are counted in a note
MAX_NODES = 60
#: characters of a name a label keeps
MAX_LABEL = 80

MARKS = {
    "succeeded": "✔",
    "failed": "✖",
    "waiting": "⏸",
    "pending": "…",
    "running": "▶",
    "skipped": "⏭",
}
# GitHub's light palette (Primer): success, danger, attention, neutral, accent
STYLES = {
    "succeeded": "fill:#dafbe1,stroke:#1a7f37,color:#1f2328",
    "failed": "fill:#ffebe9,stroke:#cf222e,color:#1f2328",
    "waiting": "fill:#fff8c5,stroke:#9a6700,color:#1f2328",
    "pending": "fill:#f6f8fa,stroke:#8c959f,color:#1f2328",
    "running": "fill:#ddf4ff,stroke:#0969da,color:#1f2328",
    "skipped": "fill:#f6f8fa,stroke:#8c959f,color:#656d76,stroke-dasharray:4 3",
}
_PLAIN = re.compile(r"[A-Za-z0-9 _.,:/()\[\]+=@-]")
# controls, bidi overrides and line separators: shown as U+FFFD, never passed on
_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def label(text: str) -> str:
    """``text`` as the inside of a quoted mermaid label: plain characters as they are, every
    other one as an entity code (``"`` → ``#34;``), cut to :data:`MAX_LABEL` characters."""
    text = _UNSAFE.sub("\ufffd", text)
    if len(text) > MAX_LABEL:
        text = text[: MAX_LABEL - 1] + "…"
    return "".join(c if _PLAIN.fullmatch(c) else f"#{ord(c)};" for c in text)


def code(text: str, *, cell: bool = True) -> str:
    """``text`` as a markdown code span that is safe in a table cell (``cell``), or in a
    heading."""
    return str(inert.summary_code(text, cell=cell))


def status_of(record: dict[str, Any], name: str) -> str:
    target = (record.get("targets") or {}).get(name)
    status = target.get("status") if isinstance(target, dict) else None
    return status if isinstance(status, str) else "pending"


def mark(status: str) -> str:
    return MARKS.get(status, "?")


def nodes(record: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """The planned targets with their dependencies, then any recorded target that is neither
    planned nor a fan-out item of a planned one (a compensation), without edges."""
    found: list[tuple[str, list[str]]] = []
    for node in record.get("graph") or []:
        if isinstance(node, dict) and isinstance(node.get("name"), str):
            deps = [d for d in node.get("dependsOn") or [] if isinstance(d, str)]
            found.append((node["name"], deps))
    planned = {name for name, _ in found}
    for name in record.get("targets") or {}:
        if name not in planned and _parent(name) not in planned:
            found.append((name, []))
    return found


def _parent(name: str) -> str:
    return name.split("[", 1)[0]


def items(record: dict[str, Any]) -> dict[str, Counter[str]]:
    """Each fan-out's items by status, under the fan-out's name."""
    counts: dict[str, Counter[str]] = {}
    for name in record.get("targets") or {}:
        if "[" in name:
            counts.setdefault(_parent(name), Counter())[status_of(record, name)] += 1
    return counts


def mermaid(record: dict[str, Any]) -> list[str]:
    """The flowchart, fenced, of at most :data:`MAX_NODES` targets."""
    drawn = nodes(record)[:MAX_NODES]
    ids = {name: f"t{i}" for i, (name, _) in enumerate(drawn)}
    fanned = items(record)
    lines = ["```mermaid", "flowchart LR"]
    used: set[str] = set()
    for name, _ in drawn:
        status = status_of(record, name)
        text = f"{mark(status)} {label(name)}"
        if name in fanned:
            tally = " ".join(f"{n} {mark(s)}" for s, n in sorted(fanned[name].items()))
            text += f" (items: {label(tally)})"
        css = status if status in STYLES else "pending"
        used.add(css)
        lines.append(f'  {ids[name]}["{text}"]:::{css}')
    for name, deps in drawn:
        lines += [f"  {ids[d]} --> {ids[name]}" for d in deps if d in ids]
    lines += [f"  classDef {css} {STYLES[css]}" for css in sorted(used)]
    return [*lines, "```"]


def table(record: dict[str, Any]) -> list[str]:
    """The same targets as rows: name, status, what it depends on."""
    rows = ["| Target | Status | Depends on |", "|---|---|---|"]
    fanned = items(record)
    for name, deps in nodes(record)[:MAX_NODES]:
        status = status_of(record, name)
        text = f"{mark(status)} {inert.summary_text(status)}"
        if name in fanned:
            tally = ", ".join(f"{n} {s}" for s, n in sorted(fanned[name].items()))
            text += f" (items: {inert.summary_text(tally)})"
        after = ", ".join(code(d) for d in deps) or "—"
        rows.append(f"| {code(name)} | {text} | {after} |")
    return rows


def section(record: dict[str, Any]) -> str:
    """One run: a heading, its graph as mermaid, then as a table."""
    run_id = str(record.get("id", "?"))
    build, status = str(record.get("build", "?")), str(record.get("status", "?"))
    heading = " ".join(code(text, cell=False) for text in (build, status))
    lines = [f"#### Run {code(run_id, cell=False)}: {heading}", ""]
    drawn = nodes(record)
    if not drawn:
        return "\n".join([*lines, "No targets recorded.", ""])
    lines += [*mermaid(record), "", *table(record)]
    if len(drawn) > MAX_NODES:
        lines += ["", f"{len(drawn) - MAX_NODES} more targets not shown (`zuke runs show`)."]
    return "\n".join([*lines, ""])
