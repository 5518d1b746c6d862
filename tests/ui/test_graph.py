"""The run's graph, laid out on the server: readable at 1,000 targets and 300 fan-out items."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from zuke._fan_out import encode_key, split_sub_name, sub_name
from zuke._serve.ui import graph
from zuke._serve.ui.graph import COMPACT, MAX_PER_ROW, PAD, Graph, item_of, layout, parent_of
from zuke.state.records import GraphNode, TargetRecord


def chain(n: int) -> list[GraphNode]:
    return [GraphNode(f"t{i}", (f"t{i - 1}",) if i else ()) for i in range(n)]


def wide(n: int) -> list[GraphNode]:
    return [
        GraphNode("root"),
        *(GraphNode(f"leaf{i}", ("root",)) for i in range(n - 2)),
        GraphNode("join", tuple(f"leaf{i}" for i in range(n - 2))),
    ]


def random_dag(n: int, seed: int) -> list[GraphNode]:
    rng = random.Random(seed)
    return [
        GraphNode(f"n{i}", tuple(f"n{j}" for j in rng.sample(range(i), min(i, rng.randint(0, 3)))))
        for i in range(n)
    ]


def placed(g: Graph) -> dict[str, tuple[int, int]]:
    return {b.name: (b.x, b.y) for b in g.boxes}


def assert_readable(nodes: list[GraphNode], g: Graph) -> None:
    at = placed(g)
    assert set(at) == {n.name for n in nodes}
    for n in nodes:  # what a target depends on comes before it, reading left to right, down
        for d in n.depends_on:
            assert (at[d][1], at[d][0]) < (at[n.name][1], at[n.name][0]), (d, n.name)
    corners = sorted(at.values())
    assert len(set(corners)) == len(corners)  # no two boxes on one spot
    for (x1, y1), (x2, y2) in itertools.pairwise(corners):
        assert x1 != x2 or y2 - y1 >= g.node_h  # nor overlapping in a column
    per_row = COMPACT[2] if g.compact else MAX_PER_ROW
    assert g.width <= PAD * 2 + per_row * (g.node_w + graph.GAP_X)  # never wider than a screen


@pytest.mark.parametrize(
    "nodes",
    [chain(1000), wide(1000), random_dag(1000, 1), random_dag(60, 2), chain(5), wide(8)],
    ids=["chain-1000", "wide-1000", "random-1000", "random-60", "chain-5", "wide-8"],
)
def test_every_target_comes_after_its_dependencies_and_the_figure_stays_narrow(
    nodes: list[GraphNode],
) -> None:
    assert_readable(nodes, layout(nodes, {}, {}))


def test_a_long_chain_wraps_into_rows_instead_of_one_tall_column() -> None:
    g = layout(chain(1000), {}, {})
    rows = {b.y for b in g.boxes}
    assert len(rows) == -(-1000 // COMPACT[2])  # full rows of compact boxes
    assert g.compact and g.height < 7000  # one column would be 44,000 pixels


def test_a_layer_of_several_targets_gets_rows_of_its_own() -> None:
    g = layout(wide(8), {}, {})
    at = placed(g)
    leaves = {at[f"leaf{i}"][1] for i in range(6)}
    assert len(leaves) == 1 and at["root"][1] < leaves.pop() < at["join"][1]


def test_small_graphs_have_full_boxes_and_large_ones_compact() -> None:
    assert not layout(chain(graph.COMPACT_OVER), {}, {}).compact
    assert layout(chain(graph.COMPACT_OVER + 1), {}, {}).compact


def test_edges_are_drawn_up_to_a_bound_and_the_rest_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(graph, "MAX_EDGES", 10)
    g = layout(wide(30), {}, {})
    assert g.edges.count("<path") == 10 and g.edges_left_out == 28 + 28 - 10
    assert re.fullmatch(r'(<path d="[MLC0-9, -]+"/>)+', g.edges)  # numbers only: safe as is


def test_a_record_with_a_cycle_or_unknown_dependencies_still_draws_every_target() -> None:
    nodes = [
        GraphNode("a", ("c", "ghost")),
        GraphNode("b", ("a",)),
        GraphNode("c", ("b",)),
        GraphNode("d"),
    ]
    g = layout(nodes, {}, {})
    assert {b.name for b in g.boxes} == {"a", "b", "c", "d"}


def test_a_fan_out_is_one_box_that_counts_its_items_by_status() -> None:
    nodes = [GraphNode("prepare"), GraphNode("deploy", ("prepare",))]
    targets = {
        "prepare": TargetRecord(status="succeeded"),
        "deploy": TargetRecord(status="running"),
    }
    for i in range(300):
        key = encode_key(f"svc/{i}")
        stages = (
            ["succeeded", "succeeded"]
            if i < 200
            else ["succeeded", "running"]
            if i < 290
            else ["failed", "skipped"]
        )
        for stage, status in zip(("check", "roll"), stages, strict=True):
            targets[sub_name("deploy", key, stage)] = TargetRecord(status=status)  # type: ignore[arg-type]
    g = layout(nodes, targets, {"deploy": "t-1"})
    assert [b.name for b in g.boxes] == ["prepare", "deploy"]
    box = g.boxes[1]
    assert box.sub.startswith("300 items")
    assert "200 succeeded" in box.title and "90 running" in box.title and "10 failed" in box.title
    widths = {s.status: s.w for s in box.bar}
    assert widths["succeeded"] / widths["running"] == pytest.approx(200 / 90, rel=0.01)  # rounded
    assert box.anchor == "t-1"
    assert "1 fan-out over 300 items" in g.summary


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        (["succeeded", "succeeded"], "succeeded"),
        (["succeeded", "failed"], "failed"),
        (["succeeded", "running"], "running"),
        (["succeeded", "pending"], "pending"),
        (["waiting", "pending"], "waiting"),
        (["skipped", "skipped"], "skipped"),
        (["succeeded", "skipped"], "succeeded"),
    ],
)
def test_an_items_status_comes_from_its_stages(statuses: list[str], expected: str) -> None:
    assert graph.item_status(statuses) == expected


def _outermost(name: str) -> tuple[str, str] | None:
    """The declared target and first-level key of a sub-target, by the engine's own rule."""
    split = split_sub_name(name)
    found = None
    while split is not None:
        parent, key, _ = split
        found = (parent, key)
        split = split_sub_name(parent)
    return found


def test_the_views_reading_of_sub_target_names_agrees_with_the_engines() -> None:
    rng = random.Random(7)
    texts = ["api", "eu-west", "a.b", "with space", "x]y", "[", "ü", "#2", "a/b", "", "50%"]
    declared = {"deploy": GraphNode("deploy"), "roll_out": GraphNode("roll_out")}
    for _ in range(500):
        parent = rng.choice(list(declared))
        name = sub_name(parent, encode_key(rng.choice(texts)), rng.choice(["check", "go-2"]))
        if rng.random() < 0.4:  # a nested fan-out inside a stage
            name = sub_name(name, encode_key(rng.choice(texts)), "inner")
        outer = _outermost(name)
        assert outer is not None
        assert parent_of(name, declared) == outer[0]
        assert item_of(name, outer[0]) == outer[1]
    assert parent_of("deployer", declared) is None and parent_of("other[x].y", declared) is None
