"""What a fan-out's batch asks of the scheduler that runs it, named as a protocol so that
``batch`` and ``fan_run`` (which the scheduler calls) do not depend on the scheduler back:
the run's outcomes and specs, its cancel and stop state, and running or skipping one
sub-target through the scheduler's own transitions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Protocol

from zuke._engine.context import RunState
from zuke._engine.hooks import TargetGuard
from zuke._engine.observer import Observer
from zuke._engine.plan import TargetSpec
from zuke._engine.result import Outcome


class FanHost(Protocol):
    """The scheduler, as a fan-out sees it (:class:`zuke._engine.scheduler.Scheduler`)."""

    specs: dict[str, TargetSpec]
    earlier: Mapping[str, Outcome]
    state: RunState
    observer: Observer
    guard: TargetGuard | None
    outcomes: dict[str, Outcome]
    waiting: dict[str, Outcome]
    cancel_requested: asyncio.Event
    stop_reason: str | None
    cancel_reason: str | None
    notify: Callable[[str], None]
    _bodies: dict[str, asyncio.Future[None]]

    def abort(self, reason: str) -> None: ...

    async def _run_target(self, name: str, *, inline: bool = False) -> Outcome: ...

    async def _settle_skipped(self, name: str, reason: str) -> None: ...
