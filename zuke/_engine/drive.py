"""Driving a planned run to its verdict: scheduler, observers, signals, the record's end.

Shared by a fresh run (:func:`zuke._engine.run.execute_async`) and a resumed
one (:mod:`zuke._engine.resumed`): both hand over a plan, the in-memory run
state and, for a recorded run, its :class:`~zuke._engine.durable.DurableRun`
(record, lease, locks) — the only difference is what was done before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zuke._engine import children
from zuke._engine.body_threads import BodyThreads
from zuke._engine.context import RunState
from zuke._engine.observer import Observers
from zuke._engine.options import RunOptions
from zuke._engine.plan import Plan
from zuke._engine.result import Outcome, RunResult, RunVerdict
from zuke._engine.scheduler import Scheduler

if TYPE_CHECKING:
    from zuke._engine.durable import DurableRun


def verdict_of(outcomes: Mapping[str, Any], plan: Plan, cancelled: bool) -> RunVerdict:
    if cancelled:
        return "cancelled"
    for name, outcome in outcomes.items():
        if name not in plan.specs:
            continue  # a fan-out's item: the fan-out's own outcome says what it means
        if outcome.status == "failed" and not plan.specs[name].proceed_after_failure:
            return "failed"
        if outcome.status == "skipped" and name not in plan.skipped:
            return "failed"
    return "succeeded"


async def drive(
    plan: Plan,
    *,
    state: RunState,
    durable: DurableRun | None,
    options: RunOptions,
    started: float,
    done: Mapping[str, Outcome] | None = None,
    earlier: Mapping[str, Outcome] | None = None,
    settle_as: RunVerdict | None = None,
    walk_plan: Plan | None = None,
) -> RunResult:
    """Run ``plan`` (minus ``done``) and settle the run: its verdict, record and lease.

    ``settle_as`` records a run that ran to its end as that status instead (a
    timed-out gate's rollback target runs, then the run ends ``cancelled``).
    ``walk_plan`` is the plan a cancellation's compensation walk covers, when it
    is not ``plan`` (the rollback's plan is just the rollback: the walk covers
    the whole run).
    """
    writer = durable.writer if durable else None
    observer = Observers(options.observers, writer=writer, warn=options.on_warning)
    # Threads start lazily; the headroom keeps a few timed-out bodies (whose threads
    # cannot be stopped) from starving the targets after them. A fan-out runs up to its
    # concurrency of sync bodies at once beside the rest: a body must never wait for a
    # thread (its timeout would be spent queueing).
    fanning = sum(s.fan_out.concurrency for s in plan.specs.values() if s.fan_out is not None)
    workers = max(32, options.parallel * 4 + 2 * fanning)
    # Not a `with` block: its exit would wait for timed-out bodies still running on threads.
    pool = BodyThreads(max_workers=workers, thread_name_prefix="zuke-body")
    existing = frozenset(children.descendants()) if options.handle_signals else frozenset()
    try:
        hooks = durable.hooks(pool) if durable is not None else None
        scheduler = Scheduler(
            plan,
            state=state,
            observer=observer,
            concurrency=options.parallel,
            pool=pool,
            clock=options.clock,
            cancel_requested=options.cancel,
            guard=durable.guard if durable else None,
            notify=options.on_warning,
            gate=hooks.gate if hooks else None,
            effects=hooks.effects if hooks else None,
            done=done,
            earlier=earlier,
            on_cancel=(lambda: children.terminate_new(existing))
            if options.handle_signals
            else None,
        )
        scheduler.inline = options.inline
        if durable is not None:
            durable.attach(scheduler)
            if options.inline:
                durable.writer.inline = scheduler.alone
        crashed = False
        # Installed until the walk has ended: a signal mid-compensation must not kill it.
        with _signal_handlers(scheduler, options, state.run_id):
            try:
                await observer.run_started(state.run_id, plan)
                outcomes = await scheduler.run()
            except BaseException:
                crashed = True  # an error of the engine or an observer: record the run failed
                raise
            finally:
                cancelled = scheduler.cancel_requested.is_set() and scheduler.stop_reason is None
                verdict = verdict_of(scheduler.outcomes, plan, cancelled)
                if scheduler.suspends() and not crashed:
                    verdict = "suspended"
                if scheduler.stop_reason is not None or crashed:
                    verdict = "failed"
                elif settle_as is not None and verdict in ("succeeded", "failed"):
                    verdict = settle_as
                if durable is not None and verdict == "cancelled" and not crashed:
                    verdict = await durable.close_cancelled(
                        walk_plan or plan, scheduler.cancel_reason or "the run was cancelled"
                    )
                elif durable is not None:
                    await durable.close(verdict)
                if durable is not None and durable.stopped_because is not None:
                    verdict = "failed"  # settled elsewhere meanwhile: never report success
        settled_by = None
        if durable is not None and durable.disposition is not None and verdict == "cancelled":
            settled_by = f"{durable.disposition}; its on_failure cancelled the run"
        result = RunResult(
            run_id=state.run_id,
            status=verdict,
            settled_by=settled_by,
            outcomes=outcomes,
            duration_ms=(time.perf_counter() - started) * 1000,
            recorded=durable is not None,
            stop_reason=scheduler.stop_reason or (durable.stopped_because if durable else None),
            record_error=durable.record_error if durable else None,
            waiting=durable.waiting() if durable and verdict == "suspended" else {},
        )
        await observer.run_finished(result)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    return result


class _signal_handlers:
    """First SIGINT/SIGTERM cancels the run; a second one exits at once with 130 — unless
    the compensation walk has begun: a compensation killed mid-way is never run again
    (at most once), so the walk finishes first and only ``kill -9`` abandons it.

    The loop handles a signal, except while a body runs on the loop's own thread
    (:meth:`Scheduler._body_inline`): then the signal's Python-level handler
    hands it to a relay thread (``SimpleQueue.put`` is safe in a signal
    handler), which does at once what the loop would — cancel (telling the
    body), or exit on the second — and the loop, when it gets the same signal
    later, only counts it.
    """

    def __init__(self, scheduler: Scheduler, options: RunOptions, run_id: str) -> None:
        self.scheduler = scheduler
        self.options = options
        self.run_id = run_id
        self.installed: list[signal.Signals] = []
        self._relay: queue.SimpleQueue[signal.Signals | None] = queue.SimpleQueue()
        self._relayed = 0  # signals the relay handled that the loop has not seen yet
        self._seen = threading.Lock()  # one signal judged at a time (loop or relay)
        self._first_done = False

    def _say(self, message: str) -> None:
        if self.options.on_interrupt is not None:
            self.options.on_interrupt(message)

    def _again(self) -> bool:
        """Whether the run is cancelled already (this is a second signal); marks it so."""
        s = self.scheduler
        with self._seen:
            again = self._first_done or s.cancel_requested.is_set() or s.state.cancelled.is_set()
            self._first_done = True
        return again

    def _python_handler(self, signum: int, frame: object) -> None:
        """Runs on the main thread between bytecodes: of an inline body, or of the loop."""
        if self.scheduler.inline_body is not None:
            self._relayed += 1
            self._relay.put(signal.Signals(signum))

    def _exit_again_or_announce(self, signum: signal.Signals) -> None:
        """A second signal exits at once (130); a first says the run is being cancelled."""
        if self._again():
            self._say(
                f"{signum.name} again: exiting now; locks held by targets still running "
                "are left to lapse at their TTL"
            )
            os._exit(130)
        self._say(
            f"{signum.name}: cancelling the run; running targets are told to stop "
            "(send it again to exit at once)"
        )

    def _relay_thread(self) -> None:
        loop_call = self._loop.call_soon_threadsafe
        while True:
            signum = self._relay.get()
            if signum is None:
                return
            self._exit_again_or_announce(signum)
            with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
                loop_call(self.scheduler.cancel)
            self.scheduler.interrupt_from_thread()

    def _on_signal(self, signum: signal.Signals) -> None:
        if self._relayed:
            self._relayed -= 1  # the relay has handled this one already
            return
        from zuke._engine.walk import rolling_back  # a run without a store never walks

        step = rolling_back(self.run_id)
        if step is not None:
            what = step or "the compensation walk"
            self._say(
                f"{signum.name}: rolling back: {what} in progress; it finishes before zuke "
                "exits (kill -9 to abandon it)"
            )
            return
        self._exit_again_or_announce(signum)
        self.scheduler.cancel()

    def __enter__(self) -> _signal_handlers:
        if not self.options.handle_signals:
            return self
        loop = self._loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                # The loop's wake-up stays; only the Python-level handler is ours.
                signal.signal(sig, self._python_handler)
                self.installed.append(sig)
            except (NotImplementedError, RuntimeError, ValueError):
                pass
        if self.installed:
            threading.Thread(target=self._relay_thread, name="zuke-signals", daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        loop = asyncio.get_running_loop()
        for sig in self.installed:
            loop.remove_signal_handler(sig)
        if self.installed:
            self._relay.put(None)
