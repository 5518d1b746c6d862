"""Sub-target names: readable, unique and reversible keys; splitting and grouping names."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.engine.fan_out_support import fan_build, run
from zuke import target
from zuke._fan_out import decode_key, encode_key, grouped, item_keys, split_sub_name, top_level
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore

SAFE = re.compile(r"[A-Za-z0-9._%#-]*")


@pytest.mark.parametrize(
    ("item", "key"),
    [
        ("api", "api"),
        ("web-1.2_x", "web-1.2_x"),
        ("acme/app", "acme%2Fapp"),
        ("a b", "a%20b"),
        ("ü", "%C3%BC"),
        ("50%", "50%25"),
        ("x#1", "x%231"),
        ("[a].b", "%5Ba%5D.b"),
    ],
)
def test_a_string_item_is_its_own_key_with_unsafe_bytes_percent_encoded(
    item: str, key: str
) -> None:
    assert encode_key(item) == key
    assert decode_key(key) == item


@pytest.mark.parametrize(
    "text",
    ["", "plain", "a/b/c", "spaces and\ttabs", "ünïcødé ✓", "%41", "a#b", "]x[", "..", "\x00"],
)
def test_every_key_decodes_back_to_the_item_text(text: str) -> None:
    key = encode_key(text)
    assert SAFE.fullmatch(key)
    assert decode_key(key) == text


def test_items_that_would_collide_once_made_safe_keep_distinct_keys() -> None:
    keys = item_keys(["acme/app", "acme_app", "acme app", "acme%2Fapp"])
    assert len(set(keys)) == 4


def test_numbers_booleans_objects_empty_and_repeated_items_get_keys_of_their_own() -> None:
    keys = item_keys([3, 2.5, True, {"name": "x"}, "", "api", "api", None])
    assert keys == ["3", "2.5", "true", "3#3", "#4", "api", "api#6", "7"]
    # an object keyed by its index never collides with a number that is the same text
    assert len(set(item_keys([3, {"n": 1}, {"n": 2}, 3]))) == 4


def test_a_repeated_key_keeps_its_index_so_its_name_decodes_to_the_item() -> None:
    assert decode_key(item_keys(["api", "api"])[1]) == "api"


@pytest.mark.parametrize(
    ("name", "split"),
    [
        ("batch[api].deploy", ("batch", "api", "deploy")),
        ("batch[1.5].deploy", ("batch", "1.5", "deploy")),
        ("batch[a].shards[x].go", ("batch[a].shards", "x", "go")),
        ("batch", None),
        ("batch[a]", None),
        ("batch[a].deploy.on_cancel", None),
    ],
)
def test_a_sub_target_name_splits_into_fan_out_key_and_stage(name: str, split: Any) -> None:
    assert split_sub_name(name) == split


def test_top_level_names_the_declared_target_of_a_nested_sub_target() -> None:
    assert top_level("batch[a].shards[x].go") == "batch"


def test_grouped_puts_each_fan_outs_items_after_it_item_by_item() -> None:
    names = [
        "prep",
        "batch",
        "batch[a].one",
        "batch[b].one",
        "batch[a].two",
        "batch[b].two",
        "batch[a].two[x].go",
        "ship",
    ]
    assert grouped(names) == [
        "prep",
        "batch",
        "batch[a].one",
        "batch[a].two",
        "batch[a].two[x].go",
        "batch[b].one",
        "batch[b].two",
        "ship",
    ]


def test_grouped_without_a_sub_target_keeps_the_order_once_each() -> None:
    """The shortcut a run without a fan-out takes (issue 28 §1): the names, duplicates
    dropped, in their order."""
    assert grouped(["b", "a", "b", "c[x]", "d]"]) == ["b", "a", "c[x]", "d]"]


def test_items_with_unsafe_text_run_under_their_encoded_names() -> None:
    store, seen = MemoryStateStore(), list[str]()

    def stages(repo: Any, index: int) -> dict[str, TargetBuilder]:
        return {"deploy": target().executes(lambda ctx: seen.append(ctx.target))}

    run(fan_build(store, stages, items=lambda b: ["acme/app", "acme_app", "a b"]))
    assert sorted(seen) == [
        "batch[a%20b].deploy",
        "batch[acme%2Fapp].deploy",
        "batch[acme_app].deploy",
    ]
