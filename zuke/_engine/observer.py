"""The transition stream: every change of a target's status passes through here once.

The scheduler emits a :class:`Transition` for each target change and awaits
every observer before going on. That is what makes durability rules
enforceable in one place: the state writer sees each transition first, so a
``running`` transition is persisted before the body starts and a
``succeeded`` one before any dependent is released.

The state writer is not an ordinary observer: :class:`Observers` keeps it in
a slot of its own and never drops it. Watching a run may fail; recording it
may not fail silently.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from zuke.state.records import TargetStatus, WaitingFor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # frozen dataclasses without compiling six methods each at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

if TYPE_CHECKING:
    from zuke._engine.plan import Plan
    from zuke._engine.result import RunResult


@dataclass(frozen=True)
class Transition:
    """A target moved to ``status`` at ``at_ms``."""

    target: str
    status: TargetStatus
    at_ms: int
    error: str | None = None
    #: extra detail for the console only (a traceback); never persisted
    detail: str | None = None
    duration_ms: float | None = None
    reason: str | None = None
    #: a gate that suspends: what it waits for
    waiting_for: WaitingFor | None = None
    #: a failure because the run was stopped while the body ran (its work may be partial)
    interrupted: bool = False
    #: ``running``: the environment the target deploys to, and its URL when given as a string
    environment: str | None = None
    environment_url: str | None = None


@dataclass(frozen=True)
class FanOutProgress:
    """Where a fan-out stands: sent when it starts, as items start and end, and at its end."""

    target: str
    total: int
    succeeded: int
    failed: int
    running: int
    waiting: int = 0
    #: the running item that has run longest, and for how long (ms)
    slowest: tuple[str, float] | None = None
    finished: bool = False


class Observer:
    """Override what you need; every hook is awaited by the engine."""

    #: may see a transition while the record's write of it is still out (it prints, and says
    #: nothing of the record: the console); the others see it once the write was answered
    before_recorded: bool = False

    async def run_started(self, run_id: str, plan: Plan) -> None:
        return None

    async def transition(self, t: Transition) -> None:
        return None

    async def run_finished(self, result: RunResult) -> None:
        return None

    async def fan_out(self, progress: FanOutProgress) -> None:
        return None


class RecordWriter(Observer):
    """What :class:`Observers` needs of the run's state writer (``writer.RunStateWriter``):
    an observer whose own failures are the record's, told through :meth:`failed` (named
    here so that this module does not depend on the writer, which depends on it)."""

    #: it may send a write and have it answered later (:meth:`begin`, :meth:`acknowledged`)
    sends: bool = False

    def failed(self, exc: BaseException) -> None:
        raise NotImplementedError

    async def begin(self, t: Transition) -> None:
        """:meth:`transition`, whose write may still be out when it returns (the writer's
        ``begin``): :meth:`acknowledged` waits for it."""
        await self.transition(t)

    async def acknowledged(self) -> None:
        """Return once the write :meth:`begin` sent was answered (and settled)."""


class Observers(Observer):
    """The run's state writer first, then each observer, in order.

    An observer that raises (a console whose pipe closed, a plugin's bug) is
    reported once through ``warn`` and skipped from then on: watching a run
    must never break it. The ``writer`` is never skipped: an error it does not
    handle itself is a record failure (:meth:`RecordWriter.failed`), and it
    goes on seeing every transition.
    """

    def __init__(
        self,
        observers: Sequence[Observer],
        *,
        writer: RecordWriter | None = None,
        warn: Callable[[str], None] = lambda m: None,
    ) -> None:
        self._writer = writer
        self._observers = list(observers)
        self._warn = warn

    async def _each(self, call: Callable[[Observer], Awaitable[None]]) -> None:
        if self._writer is not None:
            try:
                await call(self._writer)
            except Exception as exc:  # the record's problem, not the run's: never dropped
                self._writer.failed(exc)
        for o in list(self._observers):
            try:
                await call(o)
            except Exception as exc:  # any observer failure is contained
                self._observers.remove(o)
                self._warn(f"{type(o).__name__} failed and was dropped: {exc!r}")

    async def _to_writer(self, call: Callable[[RecordWriter], Awaitable[None]]) -> None:
        if self._writer is not None:
            try:
                await call(self._writer)
            except Exception as exc:  # the record's problem, not the run's: never dropped
                self._writer.failed(exc)

    async def _to(self, o: Observer, call: Callable[[Observer], Awaitable[None]]) -> None:
        try:
            await call(o)
        except Exception as exc:  # any observer failure is contained
            if o in self._observers:
                self._observers.remove(o)
            self._warn(f"{type(o).__name__} failed and was dropped: {exc!r}")

    async def run_started(self, run_id: str, plan: Plan) -> None:
        await self._each(lambda o: o.run_started(run_id, plan))

    async def transition(self, t: Transition) -> None:
        """The writer first; where it sends writes to be answered later
        (:attr:`RecordWriter.sends`), the observers that may see a transition before it is
        recorded (the console) while its write is out, then, the write answered, the
        others, in order — and only then does the transition return (the next body waits
        for it)."""
        writer = self._writer
        if writer is None or not writer.sends:
            await self._each(lambda o: o.transition(t))
            return
        rest = list(self._observers)
        try:
            try:
                await writer.begin(t)
            except Exception as exc:  # as _to_writer: the record's problem, never dropped
                writer.failed(exc)
            while rest and rest[0].before_recorded:
                await self._to(rest.pop(0), lambda o: o.transition(t))
        finally:
            await self._to_writer(lambda w: w.acknowledged())
        for o in rest:
            await self._to(o, lambda o: o.transition(t))

    async def run_finished(self, result: RunResult) -> None:
        await self._each(lambda o: o.run_finished(result))

    async def fan_out(self, progress: FanOutProgress) -> None:
        await self._each(lambda o: o.fan_out(progress))
