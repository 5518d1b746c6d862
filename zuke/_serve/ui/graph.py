"""A run's graph laid out for SVG on the server: in reading order, wrapped, fan-outs grouped.

Drawn server-side so the page needs no script and no library. The layout
stays readable at 1,000 targets:

* each target sits in the layer of its longest path from a root, so its
  dependencies always come before it in reading order (left to right, then
  down); a layer of several targets gets rows of its own, ordered by where
  their dependencies are (one barycentre pass, plan order on ties), and
  wraps after :data:`MAX_PER_ROW`; a run of one-target layers (a chain)
  flows along a row and wraps like text, so a 1,000-step chain is a block
  of rows, not a 40,000-pixel column;
* past :data:`COMPACT_OVER` targets the boxes are smaller (one line);
* a fan-out's sub-targets (``parent[item].stage``, not in the record's
  ``graph``) are not drawn one by one: the fan-out's box counts its items
  and their stages by status, with a bar, and the page lists them below;
* edges go under the boxes, with an arrowhead, at most :data:`MAX_EDGES`.

The sub-target naming rule is :func:`zuke._fan_out.split_sub_name`'s (the
engine's; the service may not import it): the key is percent-encoded, so the
first ``]`` after ``parent[`` ends it. ``tests/ui/test_graph.py`` holds the
two to agreeing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from zuke._clock import parse_iso
from zuke._duration import format_duration
from zuke.state.records import TARGET_STATUSES, GraphNode, TargetRecord

NODE_W, NODE_H = 184, 44
GAP_X, ROW_GAP = 22, 30
PAD = 16
MAX_PER_ROW = 6
#: past this many targets, boxes of one line: (width, height, per row, label length, row gap)
COMPACT_OVER = 120
COMPACT = (150, 26, 7, 17, 18)
MAX_EDGES = 3000
MAX_LABEL = 21
MAX_SUB = 28
GLYPHS = {"pending": "○", "running": "▶", "waiting": "◆", "succeeded": "✓", "failed": "✗",
          "skipped": "–"}  # fmt: skip


@dataclass(frozen=True)
class Segment:
    status: str
    x: float
    w: float


@dataclass(frozen=True)
class Box:
    x: int
    y: int
    name: str
    label: str  #: the name, shortened to fit
    status: str
    sub: str  #: the second line: what happened, or a fan-out's counts
    anchor: str  #: the id of the target's row in the page's table
    title: str  #: the whole story, for a pointer's tooltip
    bar: tuple[Segment, ...] = ()


@dataclass(frozen=True)
class Graph:
    width: int
    height: int
    node_w: int
    node_h: int
    compact: bool
    boxes: tuple[Box, ...]
    edges: str  #: the drawn dependencies as SVG ``<path>`` elements (numbers only)
    edges_left_out: int
    summary: str  #: the counts, for a screen reader and the figure's caption


def parent_of(name: str, declared: Mapping[str, object]) -> str | None:
    """The declared fan-out a sub-target ``parent[item].stage`` belongs to, if any."""
    head, bracket, _ = name.partition("[")
    return head if bracket and head in declared else None


def item_of(name: str, parent: str) -> str:
    """The (first-level) item key of a sub-target of ``parent``."""
    return name[len(parent) + 1 :].split("]", 1)[0]


def _short(name: str, most: int) -> str:
    return name if len(name) <= most else name[: most - 1] + "…"


def _ended_in(row: TargetRecord | None) -> str:
    if row is None or row.started_at is None or row.ended_at is None:
        return ""
    start, end = parse_iso(row.started_at), parse_iso(row.ended_at)
    return "" if start is None or end is None or end < start else format_duration(end - start)


def _layers(nodes: Sequence[GraphNode]) -> dict[str, int]:
    """Each node's layer: the longest path to it from a root (Kahn's order; a cycle, which
    a planned graph never has, goes below everything else)."""
    names = {n.name: n for n in nodes}
    deps = {n.name: [d for d in dict.fromkeys(n.depends_on) if d in names and d != n.name]
            for n in nodes}  # fmt: skip
    users: dict[str, list[str]] = {n: [] for n in names}
    for name, ds in deps.items():
        for d in ds:
            users[d].append(name)
    waiting = {name: len(ds) for name, ds in deps.items()}
    ready = [name for name in names if waiting[name] == 0]
    layer = dict.fromkeys(ready, 0)
    while ready:
        name = ready.pop()
        for user in users[name]:
            layer[user] = max(layer.get(user, 0), layer[name] + 1)
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    bottom = max(layer.values(), default=-1) + 1
    return {name: layer.get(name, bottom) for name in names}


def _centre(
    node: GraphNode, slot: Mapping[str, float], per_row: int, plan_order: Mapping[str, int]
) -> tuple[float, int]:
    """Where a node goes in its layer: the mean column of its dependencies, then plan order."""
    columns = [slot[d] for d in node.depends_on if d in slot]
    return (sum(columns) / len(columns) if columns else per_row, plan_order[node.name])


def item_status(statuses: Iterable[str]) -> str:
    """One item's status from its stages': failed, running or waiting if any stage is, else
    succeeded if every stage did, else pending (skipped if every stage was)."""
    seen = set(statuses)
    for status in ("failed", "running", "waiting"):
        if status in seen:
            return status
    if seen == {"succeeded"} or seen == {"succeeded", "skipped"}:
        return "succeeded"
    return "skipped" if seen == {"skipped"} else "pending"


def _counts_text(counts: Mapping[str, int]) -> str:
    return " ".join(f"{counts[s]}{GLYPHS[s]}" for s in TARGET_STATUSES if counts[s])


def layout(
    nodes: Sequence[GraphNode],
    targets: Mapping[str, TargetRecord],
    anchors: Mapping[str, str],
) -> Graph:
    """The figure of ``nodes`` (the record's graph) with each target's status from ``targets``;
    ``anchors`` names each target's row in the page (``#t-3``)."""
    nodes = list({n.name: n for n in nodes}.values())
    declared = {n.name: n for n in nodes}
    plan_order = {n.name: i for i, n in enumerate(nodes)}
    groups: dict[str, list[str]] = {}
    for name in targets:
        parent = parent_of(name, declared) if name not in declared else None
        if parent is not None:
            groups.setdefault(parent, []).append(name)
    compact = len(nodes) > COMPACT_OVER
    w, h, per_row, label, gap = (
        COMPACT if compact else (NODE_W, NODE_H, MAX_PER_ROW, MAX_LABEL, ROW_GAP)
    )
    place, wraps = _place(nodes, declared, plan_order, w, h + gap, per_row)
    columns = max((x for x, _ in place.values()), default=PAD) + w + PAD
    height = max((y for _, y in place.values()), default=PAD) + h + PAD
    boxes = [_box(name, place[name], targets, groups.get(name, []), anchors, label, compact)
             for name in place]  # fmt: skip
    edges: list[str] = []
    total = 0
    for n in nodes:
        for dep in dict.fromkeys(n.depends_on):
            if dep in place and dep != n.name:
                total += 1
                if len(edges) < MAX_EDGES:
                    wrap = (dep, n.name) in wraps
                    edges.append(_edge(place[dep], place[n.name], w, h, gap, wrap=wrap))
    counts = Counter(targets[n.name].status if n.name in targets else "pending" for n in nodes)
    summary = f"{len(nodes)} target{'s' if len(nodes) != 1 else ''}: " + ", ".join(
        f"{counts[s]} {s}" for s in TARGET_STATUSES if counts[s]
    )
    if groups:
        items = sum(len({item_of(m, p) for m in ms}) for p, ms in groups.items())
        summary += f"; {len(groups)} fan-out{'s' if len(groups) != 1 else ''} over {items} items"
    paths = "".join(f'<path d="{d}"/>' for d in edges)
    return Graph(width=max(columns, PAD * 2 + w), height=max(height, PAD * 2 + h), node_w=w,
                 node_h=h, compact=compact, boxes=tuple(boxes), edges=paths,
                 edges_left_out=total - len(edges), summary=summary)  # fmt: skip


def _place(
    nodes: Sequence[GraphNode], declared: Mapping[str, GraphNode],
    plan_order: Mapping[str, int], w: int, pitch: int, per_row: int,
) -> tuple[dict[str, tuple[int, int]], set[tuple[str, str]]]:  # fmt: skip
    """Each node's top-left corner (rows ``pitch`` apart): layers in order, rows from the
    left; one-node layers flow along a row. Also the ``(before, after)`` pairs of a flow
    that wrapped onto the next row."""
    layer_of = _layers(nodes)
    by_layer: dict[int, list[str]] = {}
    for n in nodes:
        by_layer.setdefault(layer_of[n.name], []).append(n.name)
    slot: dict[str, float] = {}
    place: dict[str, tuple[int, int]] = {}
    row, col, flowing = 0, 0, False  # the row being filled, its next column, whether a chain's
    wraps: set[tuple[str, str]] = set()
    last = ""

    def put(name: str, r: int, c: float) -> None:
        place[name] = (PAD + round(c * (w + GAP_X)), PAD + r * pitch)
        slot[name] = c

    for level in sorted(by_layer):
        names = by_layer[level]
        if len(names) == 1:
            if flowing and col >= per_row:
                wraps.add((last, names[0]))
            if not flowing or col >= per_row:
                row, col = (row + 1 if place else 0), 0
            put(names[0], row, col)
            col, flowing, last = col + 1, True, names[0]
            continue
        # Under their dependencies, as far as the rows allow.
        names = sorted(names, key=lambda n: _centre(declared[n], slot, per_row, plan_order))
        for start in range(0, len(names), per_row):
            row = row + 1 if place else 0
            for i, name in enumerate(names[start : start + per_row]):
                put(name, row, i)
        col, flowing = per_row, False
    return place, wraps


def _edge(a: tuple[int, int], b: tuple[int, int], w: int, h: int, gap: int, *, wrap: bool) -> str:
    """A dependency from the box at ``a`` to the box at ``b`` (later in reading order);
    ``wrap``: a chain going on at the start of the next row, routed as text wraps."""
    (x1, y1), (x2, y2) = a, b
    if y1 == y2:  # along a row: beside each other, or an arc over the boxes between
        if x2 - x1 <= w + GAP_X:
            return f"M{x1 + w},{y1 + h // 2} L{x2},{y2 + h // 2}"
        lift = min(gap - 6, 8 + (x2 - x1) // 60)
        xa, xb = x1 + w // 2, x2 + w // 2
        return f"M{xa},{y1} C{xa},{y1 - lift} {xb},{y2 - lift} {xb},{y2}"
    xa, xb, top = x1 + w // 2, x2 + w // 2, y1 + h
    if wrap:
        mid = top + gap // 2
        return f"M{xa},{top} L{xa},{mid} L{xb},{mid} L{xb},{y2}"
    bend = max(12, min(48, (y2 - top) // 2))
    return f"M{xa},{top} C{xa},{top + bend} {xb},{y2 - bend} {xb},{y2}"


def _box(
    name: str,
    at: tuple[int, int],
    targets: Mapping[str, TargetRecord],
    members: list[str],
    anchors: Mapping[str, str],
    label: int,
    compact: bool,
) -> Box:
    row = targets.get(name)
    status = row.status if row is not None else "pending"
    title = f"{name}: {status}"
    bar: tuple[Segment, ...] = ()
    if members:
        stages: dict[str, list[str]] = {}
        for m in members:
            stages.setdefault(item_of(m, name), []).append(targets[m].status)
        counts: Counter[str] = Counter(item_status(v) for v in stages.values())
        items = len(stages)
        sub = f"{items} item{'s' if items != 1 else ''} · {_counts_text(counts)}"
        title += f"; fan-out over {items} items: " + ", ".join(
            f"{counts[s]} {s}" for s in TARGET_STATUSES if counts[s]
        )
        x, segments = 0.0, []
        for s in TARGET_STATUSES:
            if counts[s]:
                w = ((COMPACT[0] if compact else NODE_W) - 2) * counts[s] / items
                segments.append(Segment(s, round(x, 1), round(w, 1)))
                x += w
        bar = tuple(segments)
    elif row is not None and row.waiting_for is not None and status == "waiting":
        sub = f"waiting · {row.waiting_for.trigger}"
        title += f"; waits for {row.waiting_for.trigger}"
    else:
        took = _ended_in(row)
        sub = f"{status} · {took}" if took else status
        if row is not None and row.error:
            title += f": {row.error[:300]}"
    return Box(x=at[0], y=at[1], name=name, label=_short(name, label), status=status,
               sub="" if compact else sub[:40] if members else _short(sub, MAX_SUB),
               anchor=anchors.get(name, ""), title=title, bar=bar)  # fmt: skip


__all__ = ["GLYPHS", "Box", "Graph", "Segment", "item_of", "item_status", "layout", "parent_of"]
