"""RunQuery semantics (zuke.state._query) and the `runs list` filters that build one."""

from __future__ import annotations

from dataclasses import replace

import pytest

from zuke._errors import UsageError
from zuke.runs.inspect import parse_query
from zuke.state._protocol import RunQuery
from zuke.state._query import matches, select
from zuke.state.memory import MemoryStateStore
from zuke.testing.store_contract import sample_record


def test_since_includes_a_run_created_half_a_second_after_it() -> None:
    run = sample_record("r", created_at="2026-01-15T00:00:00.500Z")
    assert matches(run, RunQuery(since="2026-01-15T00:00:00Z"))
    assert "2026-01-15T00:00:00.500Z" < "2026-01-15T00:00:00Z", "as text it would be excluded"


def test_since_with_an_offset_names_the_same_instant_as_utc() -> None:
    run = sample_record("r", created_at="2026-01-15T00:00:00.000Z")
    assert matches(run, RunQuery(since="2026-01-15T05:30:00+05:30"))
    assert not matches(run, RunQuery(since="2026-01-15T05:30:00.001+05:30"))


def test_a_record_whose_created_at_does_not_parse_never_matches_a_since() -> None:
    run = sample_record("r", created_at="yesterday-ish")
    assert not matches(run, RunQuery(since="2000-01-01T00:00:00Z"))
    assert matches(run, RunQuery()), "without since it is listed like any other"


def test_a_since_that_is_no_time_is_a_value_error_naming_it() -> None:
    with pytest.raises(ValueError, match="'last tuesday' is not an ISO-8601 time"):
        select([sample_record("r")], RunQuery(since="last tuesday"))
    with pytest.raises(ValueError, match="ISO-8601"):
        MemoryStateStore().list_runs(RunQuery(since="last tuesday"))


def test_build_matches_the_records_build_exactly() -> None:
    run = replace(sample_record("r"), build="Release")
    assert matches(run, RunQuery(build="Release"))
    assert not matches(run, RunQuery(build="release"))
    assert not matches(run, RunQuery(build="Rel"))


def test_parse_query_passes_the_build_through_and_checks_since() -> None:
    query = parse_query(status="suspended", target=None, since=None, limit=5, build="Release")
    assert query == RunQuery(status="suspended", limit=5, build="Release")
    with pytest.raises(UsageError, match="--build"):
        parse_query(status=None, target=None, since=None, limit=None, build="")
    with pytest.raises(UsageError, match="--since soon"):
        parse_query(status=None, target=None, since="soon", limit=None)
