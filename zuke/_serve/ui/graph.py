"""A run's graph laid out for SVG on the server: layers top to bottom, wrapped, fan-outs grouped.

Drawn server-side so the page needs no script and no library. The layout
stays readable at 1,000 targets:

* each target sits in the layer of its longest path from a root (its
  dependencies are always in layers above it), ordered within the layer by
  where its dependencies are (one barycentre pass, plan order on ties);
* a layer wider than :data:`MAX_PER_ROW` wraps onto more rows, so a
  thousand-wide layer is a grid and the figure is never wider than a screen;
* a fan-out's sub-targets (``parent[item].stage``, not in the record's
  ``graph``) are not drawn one by one: the fan-out's box counts its items
  and their stages by status, with a bar, and the page lists them below;
* edges are drawn under the boxes, at most :data:`MAX_EDGES` of them.

The sub-target naming rule is :func:`zuke._fan_out.split_sub_name`'s (the
engine's; the service may not import it): the key is percent-encoded, so the
first ``]`` after ``parent[`` ends it. ``tests/ui/test_graph.py`` holds the
two to agreeing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from zuke._clock import parse_iso
from zuke._duration import format_duration
from zuke.state.records import TARGET_STATUSES, GraphNode, TargetRecord

NODE_W, NODE_H = 184, 44
GAP_X, GAP_Y = 18, 12
LAYER_GAP = 34
PAD = 14
MAX_PER_ROW = 6
MAX_EDGES = 3000
MAX_LABEL = 21
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
    boxes: tuple[Box, ...]
    edges: tuple[str, ...]  #: SVG path data, one per drawn dependency
    edges_left_out: int
    summary: str  #: the counts, for a screen reader and the figure's caption


def parent_of(name: str, declared: Mapping[str, object]) -> str | None:
    """The declared fan-out a sub-target ``parent[item].stage`` belongs to, if any."""
    head, bracket, _ = name.partition("[")
    return head if bracket and head in declared else None


def item_of(name: str, parent: str) -> str:
    """The (first-level) item key of a sub-target of ``parent``."""
    return name[len(parent) + 1 :].split("]", 1)[0]


def _short(name: str) -> str:
    return name if len(name) <= MAX_LABEL else name[: MAX_LABEL - 1] + "…"


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
    return (sum(columns) / len(columns) if columns else per_row / 2, plan_order[node.name])


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
    layer_of = _layers(nodes)
    by_layer: dict[int, list[str]] = {}
    for n in nodes:
        by_layer.setdefault(layer_of[n.name], []).append(n.name)
    per_row = max(1, min(MAX_PER_ROW, max((len(v) for v in by_layer.values()), default=1)))
    width = PAD * 2 + per_row * NODE_W + (per_row - 1) * GAP_X
    slot: dict[str, float] = {}
    place: dict[str, tuple[int, int]] = {}
    y = PAD
    for level in sorted(by_layer):
        names = by_layer[level]
        if level > 0:  # under the middle of their dependencies, as far as the rows allow
            names = sorted(names, key=lambda n: _centre(declared[n], slot, per_row, plan_order))
        for start in range(0, len(names), per_row):
            row = names[start : start + per_row]
            left = PAD + (per_row - len(row)) * (NODE_W + GAP_X) // 2
            for col, name in enumerate(row):
                place[name] = (left + col * (NODE_W + GAP_X), y)
                slot[name] = (per_row - len(row)) / 2 + col
            y += NODE_H + GAP_Y
        y += LAYER_GAP - GAP_Y
    height = max(y - LAYER_GAP + GAP_Y + PAD, PAD * 2 + NODE_H)
    boxes = [_box(name, place[name], targets, groups.get(name, []), anchors) for name in place]
    edges: list[str] = []
    total = 0
    for n in nodes:
        x2, y2 = place[n.name]
        for dep in dict.fromkeys(n.depends_on):
            if dep not in place or dep == n.name:
                continue
            total += 1
            if len(edges) < MAX_EDGES:
                x1, y1 = place[dep]
                edges.append(_curve(x1 + NODE_W / 2, y1 + NODE_H, x2 + NODE_W / 2, y2))
    counts = Counter(targets[n.name].status if n.name in targets else "pending" for n in nodes)
    summary = f"{len(nodes)} target{'s' if len(nodes) != 1 else ''}: " + ", ".join(
        f"{counts[s]} {s}" for s in TARGET_STATUSES if counts[s]
    )
    if groups:
        items = sum(len({item_of(m, p) for m in ms}) for p, ms in groups.items())
        summary += f"; {len(groups)} fan-out{'s' if len(groups) != 1 else ''} over {items} items"
    return Graph(width=width, height=height, boxes=tuple(boxes), edges=tuple(edges),
                 edges_left_out=total - len(edges), summary=summary)  # fmt: skip


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    """A dependency: down from the bottom of one box, into the top of the other."""
    b = max(12.0, min(48.0, abs(y2 - y1) / 2))
    return f"M{x1:.0f},{y1:.0f} C{x1:.0f},{y1 + b:.0f} {x2:.0f},{y2 - b:.0f} {x2:.0f},{y2:.0f}"


def _box(
    name: str,
    at: tuple[int, int],
    targets: Mapping[str, TargetRecord],
    members: list[str],
    anchors: Mapping[str, str],
) -> Box:
    row = targets.get(name)
    status = row.status if row is not None else "pending"
    title = f"{name}: {status}"
    bar: tuple[Segment, ...] = ()
    if members:
        counts: Counter[str] = Counter(targets[m].status for m in members)
        items = len({item_of(m, name) for m in members})
        sub = f"{items} item{'s' if items != 1 else ''} · {_counts_text(counts)}"
        title += f"; fan-out over {items} items, {len(members)} stages run: " + ", ".join(
            f"{counts[s]} {s}" for s in TARGET_STATUSES if counts[s]
        )
        x, segments = 0.0, []
        for s in TARGET_STATUSES:
            if counts[s]:
                w = (NODE_W - 2) * counts[s] / len(members)
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
    return Box(x=at[0], y=at[1], name=name, label=_short(name), status=status,
               sub=_short(sub) if not members else sub[:40], anchor=anchors.get(name, ""),
               title=title, bar=bar)  # fmt: skip


__all__ = ["GLYPHS", "NODE_H", "NODE_W", "Box", "Graph", "Segment", "item_of", "layout",
           "parent_of"]  # fmt: skip
