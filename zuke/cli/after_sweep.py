"""What a ``zuke resume --check`` runs after its sweep: the hooks installed packages register
under the ``zuke.after_sweep`` entry point group (``zuke_gh``'s release dashboard, on
``ZUKE_GITHUB_DASHBOARD``), so the core names no integration.

A hook is called as ``hook(store, env, out, err)`` and returns an exit code; each decides
from ``env`` whether it has anything to do. The sweep's exit code is the worst of its own
and its hooks'. A hook that cannot be loaded is said in one line and counts as 1: a
setting that silently did nothing would hide a dashboard that is never kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TextIO, cast

from zuke._inert import console_line
from zuke.state._protocol import StateStore

GROUP = "zuke.after_sweep"


class AfterSweep(Protocol):
    def __call__(
        self, store: StateStore, env: Mapping[str, str], out: TextIO, err: TextIO
    ) -> int: ...


def run_hooks(store: StateStore, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    """Call every registered hook in name order; the worst exit code (0 for none)."""
    from importlib.metadata import entry_points  # ~12 ms, once a sweep

    worst = 0
    for point in sorted(entry_points(group=GROUP), key=lambda p: p.name):
        try:
            hook = cast(AfterSweep, point.load())
        except Exception as exc:  # a broken install: said, never a traceback
            err.write(console_line(f"zuke: the after-sweep hook {point.name} ({point.value}) "
                                   f"could not be loaded: {exc!r}; reinstall the package that "
                                   "provides it") + "\n")  # fmt: skip
            worst = max(worst, 1)
            continue
        worst = max(worst, int(hook(store, env, out, err)))
    return worst
