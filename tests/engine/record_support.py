"""Shared checks of the record-failure tests (in process and against a real zuke serve)."""

from __future__ import annotations

from tests.conftest import CliResult
from zuke import StateStore
from zuke.state.records import RunRecord


def the_record(store: StateStore) -> RunRecord:
    """The one run in ``store``."""
    runs = store.list_runs()
    assert len(runs) == 1
    found = store.get_run(runs[0].id)
    assert found is not None
    return found.record


def record_failure_lines(result: CliResult) -> list[str]:
    return [ln for ln in result.err.splitlines() if ln.startswith("zuke: could not record")]


def record_failure_line(result: CliResult) -> str:
    """Exit 1, exactly one ``zuke: could not record …`` line, and never "Build succeeded"."""
    assert result.code == 1, result.text
    lines = record_failure_lines(result)
    assert len(lines) == 1, result.err
    assert "Build succeeded" not in result.text
    return lines[0]
