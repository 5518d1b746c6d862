"""Launching ready targets up to a concurrency limit, and settling each one.

A target is ready when every hard dependency succeeded (or failed with
``proceed_after_failure``) and every ordering-only predecessor settled. A
failed target strands its dependents, which settle ``skipped`` at once, while
independent branches run on. Cancellation stops new launches, cancels async
bodies in flight and settles everything unlaunched ``skipped``.

Every status change goes through ``TargetRun._transition``
(:mod:`zuke._engine.target_run`, this class's base), which updates the in-memory
state first and then awaits the observers (console, state writer) — the one
place a durability rule can be enforced.
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._engine.context import RunState
from zuke._engine.hooks import EffectRunner, GateCheck, TargetGuard
from zuke._engine.loop_thread import DRAIN_NOTICE_S, waiting_notice
from zuke._engine.observer import Observer
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.result import Outcome
from zuke._engine.target_run import TargetRun
from zuke._fan_out import grouped
from zuke.state.records import WaitingFor


class Scheduler(TargetRun):
    """Runs one plan."""

    def __init__(
        self,
        plan: Plan,
        *,
        state: RunState,
        observer: Observer,
        concurrency: int,
        pool: ThreadPoolExecutor,
        guard: TargetGuard | None = None,
        clock: Clock = SYSTEM_CLOCK,
        cancel_requested: asyncio.Event | None = None,
        notify: Callable[[str], None] = lambda message: None,
        gate: GateCheck | None = None,
        effects: EffectRunner | None = None,
        done: Mapping[str, Outcome] | None = None,
        earlier: Mapping[str, Outcome] | None = None,
        on_cancel: Callable[[], object] | None = None,
    ) -> None:
        #: called once when a cancellation drains the run (terminates bodies' children)
        self.on_cancel = on_cancel
        self.plan = plan
        #: every target's spec: the plan's, and the sub-targets of fan-outs once they run
        self.specs: dict[str, TargetSpec] = dict(plan.specs)
        #: what earlier processes of this run settled (a resumed fan-out does not redo it)
        self.earlier: Mapping[str, Outcome] = dict(earlier or done or {})
        self.state = state
        self.observer = observer
        self.concurrency = max(1, concurrency)
        self.pool = pool
        self.guard = guard
        self.clock = clock
        self.outcomes: dict[str, Outcome] = {}
        self.cancel_requested = cancel_requested or asyncio.Event()
        #: why the run was stopped, when it was aborted rather than cancelled
        self.stop_reason: str | None = None
        #: who or what cancelled it, when that is known (``cancelled by ops``)
        self.cancel_reason: str | None = None
        self._index = {name: i for i, name in enumerate(plan.order)}
        self._waiting_on = {n: set(plan.hard[n]) | set(plan.soft.get(n, ())) for n in plan.order}
        self._dependents = plan.dependents()
        self._bodies: dict[str, asyncio.Future[None]] = {}
        self._started_at: dict[str, str] = {}
        #: where the scheduler says what it waits for (a body told to stop)
        self.notify = notify
        self.gate = gate
        self.effects = effects
        #: gates reached whose trigger is not satisfied: the run suspends
        self.waiting: dict[str, Outcome] = {}
        #: what each parked gate waits for (kept on its row if the run is cancelled)
        self._parked_for: dict[str, WaitingFor] = {}
        # Targets an earlier process of this run completed (a resume): done already.
        for name, outcome in (done or {}).items():
            if name in self._waiting_on:
                self.outcomes[name] = outcome
        self._init_loop_thread()

    async def run(self) -> dict[str, Outcome]:
        if self.cancel_requested.is_set():
            self.state.cancel()
        for name in self.outcomes:  # done in an earlier process: their dependents may go
            for dep in self._dependents[name]:
                self._waiting_on[dep].discard(name)
        ready = [
            self._index[n]
            for n in self.plan.order
            if not self._waiting_on[n] and n not in self.outcomes
        ]
        heapq.heapify(ready)
        running: dict[asyncio.Task[Outcome], str] = {}
        cancel_wait = asyncio.ensure_future(self.cancel_requested.wait())
        cancel_wait.add_done_callback(self._cancel_seen)
        try:
            while ready or running:
                while ready and len(running) < self.concurrency and not await self._stopping():
                    name = self.plan.order[heapq.heappop(ready)]
                    if name in self.plan.skipped:
                        await self._settle_skipped(name, "skipped with --skip")
                        self._release(name, ready=ready)
                        continue
                    if not running and (self.concurrency == 1 or not ready) and self._plain(name):
                        # The only work of the run now: awaited here, no task, no wait.
                        await self._settled(name, await self._run_direct(name), ready)
                        continue
                    running[asyncio.ensure_future(self._run_target(name))] = name
                if await self._stopping():
                    self.state.cancel()
                    await self._drain_cancelled(running)
                    break
                if not running:
                    continue
                done, _ = await asyncio.wait(
                    [*running, cancel_wait], return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    if task is cancel_wait:
                        continue
                    name = running.pop(cast("asyncio.Task[Outcome]", task))
                    await self._settled(name, cast(Outcome, task.result()), ready)
        finally:
            cancel_wait.remove_done_callback(self._cancel_seen)
            cancel_wait.cancel()
        if self.suspends():
            # Parked: gates stay waiting and what they hold back stays pending, for a resume.
            pending = Outcome(status="pending")
            return {n: self.outcomes.get(n) or self.waiting.get(n) or pending for n in self.names()}
        cancelled = self.cancel_requested.is_set()
        # Every target, a fan-out's items too: an item parked at its gate when the run
        # ended otherwise (a failure elsewhere) is settled with the rest, not left out.
        for name in self.names():
            if name not in self.outcomes:
                reason = (
                    (self.stop_reason or self.cancel_reason or "the run was cancelled")
                    if cancelled
                    else "not reached"
                )
                # A gate parked when the run was cancelled keeps what it waited for on its
                # row: the cancel's walk tells it (on_cancel), here or after a crash.
                parked = self._parked_for.get(name) if cancelled else None
                await self._settle(name, "skipped", reason=reason, waiting_for=parked)
        return {n: self.outcomes[n] for n in self.names()}

    def names(self) -> list[str]:
        """Every target of the run in plan order, each fan-out followed by its sub-targets
        (item by item, as they were materialised)."""
        return grouped(self.specs)

    def suspends(self) -> bool:
        """Whether the run ends suspended: a gate waits and nothing failed or stopped it."""
        if not self.waiting or self.cancel_requested.is_set():
            return False
        return not any(
            o.status == "failed" and not self.plan.specs[n].proceed_after_failure
            for n, o in self.outcomes.items()
            if n in self.plan.specs  # a failed item is its fan-out's to judge
        )

    async def _settled(self, name: str, outcome: Outcome, ready: list[int]) -> None:
        if outcome.status == "waiting":
            return  # parked: its dependents wait for a resume
        spec = self.plan.specs[name]
        passed = outcome.status == "succeeded" or (
            outcome.status == "failed" and spec.proceed_after_failure
        )
        await self._release_or_strand(name, passed, ready)

    # -- readiness ------------------------------------------------------------

    def _release(self, name: str, *, ready: list[int]) -> None:
        for dep in self._dependents[name]:
            waiting = self._waiting_on[dep]
            waiting.discard(name)
            if not waiting and dep not in self.outcomes:
                heapq.heappush(ready, self._index[dep])

    async def _release_or_strand(self, name: str, passed: bool, ready: list[int]) -> None:
        if passed:
            self._release(name, ready=ready)
            return
        # Hard dependents are stranded (transitively); ordering-only ones just see it settle.
        stack = [name]
        while stack:
            current = stack.pop()
            for dep in self._dependents[current]:
                if dep in self.outcomes:
                    continue
                if current in self.plan.hard[dep]:
                    await self._settle_skipped(dep, f"{current} did not succeed")
                    stack.append(dep)
                else:
                    self._waiting_on[dep].discard(current)
                    if not self._waiting_on[dep]:
                        heapq.heappush(ready, self._index[dep])

    async def _drain_cancelled(self, running: dict[asyncio.Task[Outcome], str]) -> None:
        # Cancel the bodies, not the targets' tasks: each target still settles (and
        # releases its lock) on its own path, with no write torn by a cancellation.
        # A synchronous body cannot be interrupted, only told (ctx.cancelled), and its
        # target's task ends only when it has returned: what runs after a cancellation
        # must never run beside the work it stops. A second Ctrl-C exits at once.
        for body in list(self._bodies.values()):
            body.cancel()
        self._run_on_cancel()
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=DRAIN_NOTICE_S)
        if pending:
            self.notify(waiting_notice(", ".join(sorted(running[t] for t in pending))))
        await asyncio.gather(*running, return_exceptions=True)
