"""The JSON nesting limit (issue 15, item 8): ``zuke._jsondepth``, checked without recursion."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zuke import SignalRefusedError, UsageError
from zuke._jsondepth import (
    MAX_JSON_DEPTH,
    check_json_depth,
    check_json_text_depth,
    json_text_depth,
)


def nested(depth: int) -> Any:
    value: Any = 1
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[{{{"', 0),
        ("[]", 1),
        ('{"a": [1, {"b": []}], "c": {}}', 4),
        (r'["\"[[[", "\\", [["]"]]]', 3),  # escaped quotes and backslashes end no string early
        ("[" * 5000 + "]" * 5000, 5000),
        ("[[[", 3),  # not JSON: a number all the same; the parse after it says what is wrong
    ],
)
def test_text_depth_counts_brackets_outside_strings(text: str, depth: int) -> None:
    assert json_text_depth(text) == depth


def test_text_depth_agrees_with_the_parsed_value() -> None:
    for depth in (1, 2, MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1):
        text = json.dumps(nested(depth))
        assert json_text_depth(text) == depth
        deep_enough = depth <= MAX_JSON_DEPTH
        for check, subject in ((check_json_text_depth, text), (check_json_depth, nested(depth))):
            if deep_enough:
                check(subject)
            else:
                with pytest.raises(UsageError):
                    check(subject)


def test_a_value_at_the_limit_survives_a_round_trip_through_json() -> None:
    value = nested(MAX_JSON_DEPTH)
    check_json_depth(value)
    record = json.loads(json.dumps({"signals": {"x": {"data": value}}}))
    assert record["signals"]["x"]["data"] == value


def test_the_message_names_what_and_the_limit_and_never_the_payload() -> None:
    with pytest.raises(UsageError) as caught:
        check_json_text_depth("[" * 980 + "]" * 980, what="--data")
    assert str(caught.value).startswith("--data is nested too deep: the limit is 64 levels")
    assert "[[" not in str(caught.value)


def test_a_caller_chooses_the_error_and_the_limit() -> None:
    with pytest.raises(
        SignalRefusedError, match=r"^the signal's data is nested too deep: the limit is 3"
    ):
        check_json_depth(nested(4), limit=3, what="the signal's data", error=SignalRefusedError)
    check_json_depth(nested(3), limit=3, error=SignalRefusedError)


def test_a_value_deeper_than_python_can_encode_is_refused_without_recursion() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(UsageError):
        check_json_depth(deep)


def test_a_value_that_contains_itself_is_refused_not_walked_for_ever() -> None:
    loop: list[Any] = []
    loop.append({"again": loop})
    with pytest.raises(UsageError):
        check_json_depth(loop)
