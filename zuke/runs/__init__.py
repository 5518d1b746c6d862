"""Operations on recorded runs, as the CLI and tests call them: list, show, prune
(and, with later steps, resume, cancel and the sweep).

:mod:`zuke.runs.cancel` loads on first use of one of its names: ``zuke runs
list`` never needs it, and its imports cost a few milliseconds of start-up.
"""

from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from zuke.runs.cancel import CancelResult, ForeignRunError, cancel_run

_FROM_CANCEL = frozenset({"CancelResult", "ForeignRunError", "cancel_run"})


def __getattr__(name: str) -> object:
    if name in _FROM_CANCEL:
        from zuke.runs import cancel

        return getattr(cancel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
