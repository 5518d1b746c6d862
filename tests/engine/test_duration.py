from __future__ import annotations

import pytest

from zuke import DurationError
from zuke._duration import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "ms"),
    [
        ("4h", 14_400_000),
        ("30m", 1_800_000),
        ("90s", 90_000),
        ("1h30m", 5_400_000),
        ("250ms", 250),
        ("2d", 172_800_000),
        ("1.5s", 1500),
        (1500, 1500),
        ("1500", 1500),
    ],
)
def test_durations_parse_to_milliseconds(value: object, ms: int) -> None:
    assert parse_duration(value) == ms


@pytest.mark.parametrize("value", ["4x", "", "h", "1h 30m", "-5s", "ten", None, True, float("nan")])
def test_bad_durations_name_the_value(value: object) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration(value, what="lock TTL")
    assert str(info.value).startswith("lock TTL: ")
    assert repr(value) in str(info.value)


@pytest.mark.parametrize("value", [0, "0s", -1])
def test_zero_and_negative_durations_are_rejected_unless_allowed(value: object) -> None:
    with pytest.raises(DurationError, match="must be"):
        parse_duration(value)


def test_zero_is_allowed_where_asked() -> None:
    assert parse_duration(0, allow_zero=True) == 0


def test_format_duration_is_short() -> None:
    assert [format_duration(x) for x in (12, 3400, 125_000, 3_720_000)] == [
        "12ms",
        "3.4s",
        "2m05s",
        "1h02m",
    ]


@pytest.mark.parametrize("value", ["٣", "٣s", "1_000", "1_000ms", "１h", ".5s", "5.s"])
def test_durations_take_ascii_digits_only_like_numbers(value: str) -> None:
    with pytest.raises(DurationError, match="is not a duration"):
        parse_duration(value)
