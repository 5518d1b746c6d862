"""ISO stamps and epoch milliseconds round-trip exactly."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zuke._clock import iso, parse_iso


@given(st.integers(min_value=0, max_value=4_000_000_000_000))
def test_every_millisecond_round_trips_through_its_iso_stamp(ms: int) -> None:
    assert parse_iso(iso(ms)) == ms


def test_an_instant_a_float_would_round_down_is_read_exactly() -> None:
    # ``datetime.timestamp() * 1000`` is a hair under 2,183,226,373,411 here, and truncated
    assert parse_iso("2039-03-08T19:46:13.411Z") == 2_183_226_373_411


def test_a_stamp_without_an_offset_is_utc_and_garbage_is_none() -> None:
    assert parse_iso("1970-01-01T00:00:01") == 1000
    assert parse_iso("not a time") is None
