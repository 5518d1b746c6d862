"""The watcher's sweeps on one event loop, kept from sweep to sweep (issue 28 §3).

A wake's sweep should not pay for a fresh loop: ``asyncio.run`` per sweep made
one, started the default executor's worker thread again for the sweep's first
store call, and joined it at the end. :class:`SweepLoop` keeps one
``asyncio.Runner`` for the watcher's life; :class:`BuildSweepLoop` is
:func:`zuke.runs.watch.watch`'s sweep on it — every run, or the runs a wake named.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine

    from zuke._build import Build
    from zuke._engine.run import RunOptions
    from zuke.runs.continuation import ResumeOptions
    from zuke.runs.sweep_report import SweepReport
    from zuke.state._protocol import StateStore

T = TypeVar("T")


class SweepLoop:
    """One event loop for every sweep (an ``asyncio.Runner``, made on first use).

    Kept, the loop and its executor's threads serve every sweep; :meth:`close` (the
    watcher's end: ``Watcher.run`` calls its sweep's ``close``) shuts them down as
    ``asyncio.run`` would have. A sweep leaves no task behind (the engine awaits what
    it starts), so nothing of one sweep runs into the next."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._runner is None:
            import asyncio

            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


class BuildSweepLoop(SweepLoop):
    """A build's sweeps in one store on one loop: every run (called), or the named ones
    (:meth:`runs`, what a wake that named them asks)."""

    def __init__(
        self, build_cls: type[Build], store: StateStore, resume: ResumeOptions, run: RunOptions
    ) -> None:
        super().__init__()
        self._build, self._store, self._resume, self._options = build_cls, store, resume, run

    def __call__(self, stop: Callable[[], bool]) -> SweepReport:
        return self.runs(stop, None)

    def runs(self, stop: Callable[[], bool], named: frozenset[str] | None) -> SweepReport:
        from zuke.runs.sweep import resume_check_async

        return self.run(resume_check_async(self._build, self._store, resume=self._resume,
                                           run=self._options, stop=stop, runs=named))  # fmt: skip


__all__ = ["BuildSweepLoop", "SweepLoop"]
