"""Operations on recorded runs, as the CLI and tests call them: list, show, prune
(and, with later steps, resume, cancel and the sweep)."""

from zuke.runs.cancel import CancelResult, ForeignRunError, cancel_run
from zuke.runs.inspect import (
    RunCounts,
    count_runs,
    list_runs,
    parse_query,
    prune_runs,
    select_prunable,
    show_run,
)
from zuke.runs.store import open_store

__all__ = [
    "CancelResult",
    "ForeignRunError",
    "RunCounts",
    "cancel_run",
    "count_runs",
    "list_runs",
    "open_store",
    "parse_query",
    "prune_runs",
    "select_prunable",
    "show_run",
]
