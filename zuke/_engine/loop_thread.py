"""The scheduler's side of a body that runs on the event loop's own thread.

When one target is the run's only work, the scheduler awaits it itself (no
task, no ``asyncio.wait``) and a plain synchronous body runs on the loop's
thread (no thread hop; see ``docs/architecture.md``, Rules). While such a body
runs the loop stands still, so what must reach it comes from other threads —
a signal's relay, the cancel watch, a heartbeat whose renewal was refused —
through :meth:`LoopThread.interrupt_from_thread`; everything else is the
loop's, as for any target.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from zuke._engine.context import Context, RunState
from zuke._engine.inline_body import inlinable, run_body_inline
from zuke._engine.plan import TargetSpec
from zuke._engine.result import Outcome

#: How long a cancellation waits before saying which bodies it still waits for.
DRAIN_NOTICE_S = 0.5


def waiting_notice(names: str) -> str:
    return (
        f"waiting for {names} to return (told to stop through ctx.cancelled); "
        "interrupt again to exit now and leave its locks to lapse at their TTL"
    )


class LoopThread:
    """Mixed into :class:`~zuke._engine.scheduler.Scheduler`: the run's only target
    awaited directly, its body on the loop's thread, and how other threads reach it."""

    state: RunState
    notify: Callable[[str], None]
    on_cancel: Callable[[], object] | None
    cancel_requested: asyncio.Event
    stop_reason: str | None
    cancel_reason: str | None
    specs: dict[str, TargetSpec]
    _bodies: dict[str, asyncio.Future[None]]

    if TYPE_CHECKING:

        def cancel(self, reason: str | None = None) -> None: ...

        async def _run_target(self, name: str, *, inline: bool = False) -> Outcome: ...

    def _init_loop_thread(self) -> None:
        #: whether a plain synchronous body may run on the loop's thread when it is the
        #: run's only work (see :meth:`_run_direct`): only when the loop runs nothing else
        #: (``RunOptions.inline``)
        self.inline = False
        #: the target the scheduler awaits itself, with no task of its own, if any
        self._direct: str | None = None
        #: the target whose body runs on the loop's thread right now, if any
        self.inline_body: str | None = None
        self._inline_done = threading.Event()
        #: guards the hand-over between a body starting on the loop's thread and another
        #: thread's interruption (:meth:`interrupt_from_thread`)
        self._inline_lock = threading.Lock()
        self._interrupted = False
        self._hook_lock = threading.Lock()
        self._notice: asyncio.TimerHandle | threading.Timer | None = None

    def interrupt_from_thread(self) -> None:
        """Reach a body that runs on the loop's thread now, from another thread.

        The caller (a signal's relay, the cancel watch, a heartbeat whose renewal
        was refused) has queued the loop's own handling first; this does at once
        what the loop would do for the body, which it cannot while the body runs:
        tell it (``ctx.cancelled``), end the child processes it started, and say
        after a while that the run waits for it.
        """
        with self._inline_lock:
            self._interrupted = True
            name = self.inline_body
        if name is None:
            return  # nothing holds the loop: it handles what was queued, as ever
        self.state.cancel()
        self._run_on_cancel()
        timer = threading.Timer(DRAIN_NOTICE_S, self._inline_notice, (name,))
        timer.daemon = True
        self._notice = timer
        timer.start()

    def _inline_notice(self, name: str) -> None:
        if self.inline_body == name and not self._inline_done.is_set():
            self.notify(waiting_notice(name))

    def _run_on_cancel(self) -> None:
        """The ``on_cancel`` hook, once, from whichever thread gets there first."""
        with self._hook_lock:
            hook, self.on_cancel = self.on_cancel, None
        if hook is None:
            return
        try:
            hook()
        except Exception as exc:  # never let the hook stop the drain
            self.notify(f"stopping the bodies' child processes failed ({exc})")

    def _cancel_seen(self, _: object) -> None:
        """The cancel event was set: a target the scheduler awaits itself is stopped now,
        as the drain stops the targets' tasks (see :meth:`_drain_cancelled`)."""
        self.state.cancel()
        name = self._direct
        if name is None:
            return
        for body in list(self._bodies.values()):
            body.cancel()
        self._run_on_cancel()
        self._notice = asyncio.get_running_loop().call_later(
            DRAIN_NOTICE_S, lambda: self.notify(waiting_notice(name))
        )

    async def _stopping(self) -> bool:
        """Whether the run is being cancelled (or stopped).

        A thread that reached an inline body (:meth:`interrupt_from_thread`) set
        the run's ``cancelled`` after queueing the loop's own handling: one turn
        of the loop runs that handling, so the reason is known before anything
        acts on it.
        """
        if self.cancel_requested.is_set():
            return True
        if not self.state.cancelled.is_set():
            return False
        await asyncio.sleep(0)
        if not self.cancel_requested.is_set():
            self.cancel()
        return True

    def alone(self) -> bool:
        """Whether one target is the run's only work now, awaited by the scheduler itself
        (nothing else needs the loop: a local store's write may be made on it)."""
        return self._direct is not None

    def _plain(self, name: str) -> bool:
        """A target with a body, no gate and no fan-out: the scheduler may await it itself."""
        spec = self.specs[name]
        return spec.body is not None and spec.wait is None and spec.fan_out is None

    async def _run_direct(self, name: str) -> Outcome:
        """Run ``name`` as the run's only work, awaited by the scheduler itself.

        A cancellation meanwhile stops it at once (:meth:`_cancel_seen`), as
        the drain stops a target's task. A plain synchronous body runs on the
        loop's thread (no thread hop) when the run allows it.
        """
        self._direct = name
        try:
            return await self._run_target(name, inline=self.inline and inlinable(self.specs[name]))
        finally:
            self._direct = None
            notice, self._notice = self._notice, None
            if notice is not None:
                notice.cancel()

    def _enter_inline(self, name: str) -> bool:
        """Mark ``name``'s body as running on the loop's thread — unless another thread has
        stopped the run already (then its stop is queued for the loop: start nothing)."""
        with self._inline_lock:
            if self._interrupted:
                return False
            self._inline_done.clear()
            self.inline_body = name
            return True

    async def _body_inline(self, spec: TargetSpec, ctx: Context) -> None:
        """The body on the loop's thread; what reaches it meanwhile comes from other threads
        (:meth:`interrupt_from_thread`)."""
        name = spec.name

        def register(task: asyncio.Future[None]) -> None:
            self._bodies[name] = task

        try:
            await run_body_inline(spec, ctx, register)
        finally:
            self.inline_body = None
            self._inline_done.set()
            self._bodies.pop(name, None)
