"""One target's way through the run, for the scheduler (:mod:`zuke._engine.scheduler`, which
decides when each is ready): its transitions (every status change, the durability rule's
one place), its guard (a lock), its gate or fan-out, its body — awaited, on the loop's
thread or on a worker — its effects, and how it settles or parks; and stopping the run
(``cancel``, ``abort``), which a target's lost lock or lease asks for."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from zuke._clock import Clock, iso
from zuke._engine.context import Context, RunState
from zuke._engine.executor import BodyFailure, describe, in_own_task, run_body, settle
from zuke._engine.hooks import EffectRunner, GateCheck, GateVerdict, Held, TargetGuard
from zuke._engine.loop_thread import LoopThread
from zuke._engine.observer import Observer, Transition
from zuke._engine.plan import Plan, TargetSpec
from zuke._engine.result import Outcome
from zuke._errors import ZukeError
from zuke.state.records import TargetStatus, WaitingFor


class TargetRun(LoopThread):
    """Running and settling one target; :class:`~zuke._engine.scheduler.Scheduler` sets
    these attributes up."""

    plan: Plan
    specs: dict[str, TargetSpec]
    earlier: Mapping[str, Outcome]
    state: RunState
    observer: Observer
    pool: ThreadPoolExecutor
    guard: TargetGuard | None
    clock: Clock
    outcomes: dict[str, Outcome]
    cancel_requested: asyncio.Event
    stop_reason: str | None
    cancel_reason: str | None
    notify: Callable[[str], None]
    gate: GateCheck | None
    effects: EffectRunner | None
    waiting: dict[str, Outcome]
    _bodies: dict[str, asyncio.Future[None]]
    _started_at: dict[str, str]
    _parked_for: dict[str, WaitingFor]

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
