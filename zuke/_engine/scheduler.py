"""Launching ready targets up to a concurrency limit, and settling each one.

A target is ready when every hard dependency succeeded (or failed with
``proceed_after_failure``) and every ordering-only predecessor settled. A
failed target strands its dependents, which settle ``skipped`` at once, while
independent branches run on. Cancellation stops new launches, cancels async
bodies in flight and settles everything unlaunched ``skipped``.

Every status change goes through :meth:`Scheduler._transition`, which updates
the in-memory state first and then awaits the observers (console, state
writer) — the one place a durability rule can be enforced.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.context import Context, RunState
from zuke._engine.executor import BodyFailure, describe, in_own_task, run_body, settle
from zuke._engine.hooks import EffectRunner, GateCheck, GateVerdict, Held, TargetGuard
from zuke._engine.loop_thread import DRAIN_NOTICE_S, LoopThread, waiting_notice
from zuke._engine.observer import Observer, Transition
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.result import Outcome
from zuke._errors import ZukeError
from zuke._fan_out import grouped
from zuke.state.records import TargetStatus, WaitingFor


class Scheduler(LoopThread):
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

    def cancel(self, reason: str | None = None) -> None:
        """Stop launching; cancel what can be cancelled. The run ends ``cancelled``."""
        if reason is not None and self.cancel_reason is None:
            self.cancel_reason = reason
        self.state.cancel()
        self.cancel_requested.set()

    def abort(self, reason: str) -> None:
        """Stop the run because it cannot go on (a lost lock or lease). It ends ``failed``."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.cancel()

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
        for name in self.plan.order:
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

    # -- one target -------------------------------------------------------------

    async def _transition(self, t: Transition) -> None:
        if t.status == "running":
            self._started_at[t.target] = iso(t.at_ms)
        outcome = Outcome(
            status=t.status,
            error=t.error,
            started_at=self._started_at.get(t.target),
            ended_at=iso(t.at_ms) if t.status in ("succeeded", "failed", "skipped") else None,
            duration_ms=t.duration_ms,
            detail=t.detail,
        )
        self.state.settle(t.target, outcome)
        if t.status in ("succeeded", "failed", "skipped"):
            self.outcomes[t.target] = outcome
        await self.observer.transition(t)

    async def _settle(
        self,
        name: str,
        status: TargetStatus,
        *,
        error: str | None = None,
        detail: str | None = None,
        duration_ms: float | None = None,
        reason: str | None = None,
        interrupted: bool = False,
        waiting_for: WaitingFor | None = None,
    ) -> Outcome:
        # Redacted here, once: the outcome reaches the console, the record and the
        # caller of the programmatic API (RunResult) alike.
        redact = self.state.redactor.text
        await self._transition(
            Transition(
                target=name,
                status=status,
                at_ms=self.clock.now_ms(),
                error=redact(error) if error else error,
                detail=redact(detail) if detail else detail,
                duration_ms=duration_ms,
                reason=reason,
                interrupted=interrupted,
                waiting_for=waiting_for,
            )
        )
        return self.outcomes[name]

    async def _settle_skipped(self, name: str, reason: str) -> None:
        await self._settle(name, "skipped", reason=reason)

    def _environment_url(self, spec: TargetSpec, ctx: Context) -> None:
        """``url=``'s function of ``ctx``, called as the target starts: what it raises or
        returns that is no URL fails the target, in one line."""
        assert callable(spec.environment_url)
        try:
            value = spec.environment_url(ctx)
        except Exception as exc:
            raise BodyFailure(f"environment({spec.environment!r}) url: {exc!r}") from exc
        if value is not None:
            try:
                self.state.set_environment_url(spec.name, value)
            except ZukeError as exc:
                raise BodyFailure(str(exc).removeprefix("zuke: ")) from exc

    async def _run_target(self, name: str, *, inline: bool = False) -> Outcome:
        spec = self.specs[name]
        started = time.perf_counter()
        url = spec.environment_url
        await self._transition(
            Transition(
                target=name, status="running", at_ms=self.clock.now_ms(),
                environment=spec.environment, environment_url=url if isinstance(url, str) else None,
            )
        )  # fmt: skip
        ctx = Context(self.state, name)
        held: Held | None = None
        started_body = False

        def elapsed() -> float:
            return (time.perf_counter() - started) * 1000

        try:
            if callable(url):
                self._environment_url(spec, ctx)
            elif url is not None:  # checked at definition; what ``ctx.environment_url`` reads
                self.state.set_environment_url(name, url, recorded=True)
            if self.guard is not None:
                held = await self.guard(spec, ctx)
            if await self._stopping():
                raise BodyFailure(
                    self.stop_reason or self.cancel_reason or "cancelled before its body ran"
                )
            if spec.wait is not None:
                verdict = await self._check_gate(spec, ctx)
                if verdict.status == "waiting":
                    return await self._park(name, verdict)
                if verdict.status == "failed":
                    raise BodyFailure(verdict.error or "the wait failed")
                if self.effects is not None and spec.effects:
                    await self.effects(spec, ctx)
                return await self._settle(name, "succeeded", duration_ms=elapsed())
            if spec.fan_out is not None:
                return await self._run_fan_out(spec, held, elapsed)
            if spec.body is None:  # an aggregate: its dependencies are the work
                return await self._settle(name, "succeeded", duration_ms=elapsed())
            if inline and held is None:  # a held claim races the body: keep its thread
                if not self._enter_inline(name):
                    await asyncio.sleep(0)  # another thread's stop, queued for the loop, lands
                    raise BodyFailure(
                        self.stop_reason or self.cancel_reason or "cancelled before its body ran"
                    )
                started_body = True
                await self._body_inline(spec, ctx)
                if await self._stopping():
                    # Told to stop while it ran: as a body the drain cancelled on its thread.
                    error = self.stop_reason or self.cancel_reason or "cancelled while running"
                    return await self._settle(
                        name, "failed", error=error, duration_ms=elapsed(), interrupted=True
                    )
                return await self._settle(name, "succeeded", duration_ms=elapsed())
            started_body = True
            if held is None and not in_own_task(spec, self.pool):
                await self._body_awaited(spec, ctx)
                if await self._stopping():  # told to stop while it ran, as an inline body
                    error = self.stop_reason or self.cancel_reason or "cancelled while running"
                    return await self._settle(
                        name, "failed", error=error, duration_ms=elapsed(), interrupted=True
                    )
            else:
                body = asyncio.ensure_future(
                    run_body(spec, ctx, self.pool, self.notify, own_task=held is not None)
                )
                self._bodies[name] = body
                try:
                    if held is None:
                        await settle(body)  # even if this task is torn down: the body first
                        body.result()
                    else:
                        await self._body_while_held(body, held)
                finally:
                    self._bodies.pop(name, None)
            if self.effects is not None and spec.effects:
                await self.effects(spec, ctx)
        except BodyFailure as failure:
            stopping = await self._stopping()
            return await self._settle(
                name, "failed", error=failure.message, detail=failure.detail,
                duration_ms=elapsed(), interrupted=started_body and stopping,
            )  # fmt: skip
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # this task itself is being torn down, not just its body
            error = self.stop_reason or self.cancel_reason or "cancelled while running"
            return await self._settle(
                name, "failed", error=error, duration_ms=elapsed(), interrupted=started_body
            )
        except Exception as exc:  # a guard failure: a lock conflict, a store that is down
            message, detail = describe(exc)
            return await self._settle(
                name, "failed", error=message, detail=detail, duration_ms=elapsed()
            )
        finally:
            if held is not None:
                await self._release_lock(name, held)
        return await self._settle(name, "succeeded", duration_ms=elapsed())

    async def _body_awaited(self, spec: TargetSpec, ctx: Context) -> None:
        """The body awaited in this task (no task of its own, see ``in_own_task``): a
        cancellation reaches it through its job's future, registered as its body."""
        name = spec.name

        def register(job: asyncio.Future[None]) -> None:
            self._bodies[name] = job

        try:
            await run_body(spec, ctx, self.pool, own_task=False, register=register)
        finally:
            self._bodies.pop(name, None)

    async def _check_gate(self, spec: TargetSpec, ctx: Context) -> GateVerdict:
        if self.gate is None:
            return GateVerdict("failed", error="a gate needs a state store to wait in")
        return await self.gate(spec, ctx)

    async def _run_fan_out(
        self, spec: TargetSpec, held: Held | None, elapsed: Callable[[], float]
    ) -> Outcome:
        from zuke._engine.fan_run import run_fan_out

        verdict = await run_fan_out(self, spec, held)
        if verdict.status == "waiting":
            return await self._park(spec.name, verdict)
        if verdict.status == "failed":
            raise BodyFailure(verdict.error or "the fan-out failed")
        return await self._settle(spec.name, "succeeded", duration_ms=elapsed())

    async def _park(self, name: str, verdict: GateVerdict) -> Outcome:
        at = self.clock.now_ms()
        await self._transition(
            Transition(
                target=name,
                status="waiting",
                at_ms=at,
                waiting_for=verdict.waiting_for,
                reason=verdict.error,
            )
        )
        outcome = Outcome(status="waiting", started_at=self._started_at.get(name))
        self.waiting[name] = outcome
        if verdict.waiting_for is not None:
            self._parked_for[name] = verdict.waiting_for
        return outcome

    async def _release_lock(self, name: str, held: Held) -> None:
        """Give a target's lock back. Its body has returned: attempts end only then."""
        await held.release()

    async def _body_while_held(self, body_task: asyncio.Future[None], held: Held) -> None:
        """Wait for the body; if the claim is lost meanwhile, stop it and the run."""
        lost = asyncio.ensure_future(held.lost.wait())
        try:
            waiting: list[asyncio.Future[Any]] = [body_task, lost]
            try:
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
            except asyncio.CancelledError:
                await settle(body_task)
                raise
        finally:
            lost.cancel()
        if body_task.done():
            body_task.result()
            return
        message = held.loss_message()
        self.abort(message)
        body_task.cancel()
        # The claim is gone, but the body still runs until it has returned.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await settle(body_task)
        raise BodyFailure(message)
