"""The durable side of gates and effects: checking a trigger, running an effect once.

**Gates.** When the scheduler reaches a gate, :class:`GateKeeper` asks its
trigger through a :class:`~zuke._waits.WaitContext` backed by the run's
record: the gate's metadata is its ``ctx.state``, ``persist()`` flushes the
state writer, signals are the record's. Not satisfied means ``waiting`` with
a ``waitingFor`` row: the trigger, the deadline — stamped the first time the
gate suspends and kept by every later suspension, so repeated checks never
push it out — and the timeout disposition. A trigger that raises leaves the
gate waiting (the error is shown and recorded as the check's ``detail``): a
flaky predicate must not fail a release that is otherwise fine.

**Effects.** ``t.effect(name, body)`` runs after the body. Its intent — a
``pending`` row with ``intentAt`` and an attempt count — is written and
fsynced *before* the body runs, and ``done`` after. An effect recorded done
is skipped when the target is driven again (a resume after a crash), so an
effect whose process died mid-way is re-driven at least once and one that
completed never again; ``ctx.redriven`` tells a body it may be repeating.

**A run taken over calls nothing.** The intent (an effect's ``pending`` row,
a trigger's ``ctx.persist()``) must land under the run's lease, which this
process still holds; if the run is someone else's now the writer raises
:class:`~zuke._engine.writer.RunTakenOverError` and the effect's body or the
trigger's call is not made: the new owner makes it, once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from zuke._clock import Clock, iso, parse_iso
from zuke._engine.context import Context, RunState
from zuke._engine.executor import BodyFailure, call_body, describe
from zuke._engine.hooks import GateVerdict
from zuke._engine.plan import TargetSpec
from zuke._engine.writer import RunStateWriter, RunTakenOverError
from zuke._errors import StateError
from zuke._waits import GateState, NotYet, Satisfied, WaitContext, WaitFailed, WaitSpec, ask
from zuke.state.records import EffectRecord, WaitingFor


def waiting_row(spec: WaitSpec, *, deadline_ms: int | None, checked_ms: int,
                detail: str | None, failed: str | None = None) -> WaitingFor:  # fmt: skip
    return WaitingFor(
        trigger=spec.trigger.descriptor,
        deadline=None if deadline_ms is None else iso(deadline_ms),
        on_timeout=spec.on_timeout,
        on_timeout_is_target=spec.on_timeout_is_target,
        checked_at=iso(checked_ms),
        detail=detail,
        failed=failed,
    )


def gate_deadline_ms(spec: WaitSpec, prior: WaitingFor | None, now_ms: int) -> int | None:
    """The gate's deadline: the one recorded when it first suspended, else now + timeout."""
    if prior is not None and prior.deadline is not None:
        recorded = parse_iso(prior.deadline)
        if recorded is not None:
            return recorded
    return None if spec.timeout_ms is None else now_ms + spec.timeout_ms


class GateKeeper:
    """Checks gates against the run's record (the scheduler's ``gate`` hook)."""

    def __init__(
        self,
        *,
        state: RunState,
        writer: RunStateWriter,
        clock: Clock,
        params: Mapping[str, Any],
        warn: Callable[[str], None],
        shared: dict[str, Any] | None = None,
        cancel: Callable[[str], None] | None = None,
    ) -> None:
        #: cancels the run (a gate whose trigger failed, with ``on_failure("cancel-run")``)
        self.cancel = cancel
        self.state = state
        self.writer = writer
        self.clock = clock
        self.params = params
        self.warn = warn
        self.shared: dict[str, Any] = {} if shared is None else shared

    def context(self, spec: TargetSpec, now_ms: int) -> WaitContext:
        assert spec.wait is not None
        prior = self.writer.row(spec.name).waiting_for
        name = spec.name
        return WaitContext(
            run_id=self.state.run_id,
            target=name,
            params=self.params,
            signals=self.state.signals,
            state=GateState(
                lambda: self.state.meta(name), lambda p: self.state.patch_meta(name, p)
            ),
            now_ms=now_ms,
            deadline_ms=gate_deadline_ms(spec.wait, prior, now_ms),
            persist=self._persist,
            shared=self.shared,
            first_check=prior is None,
            actor=self.state.actor,
            actor_source=self.state.actor_source,
            resumed_by=self.state.resumed_by,
            redact=self.state.redactor.text,
        )

    async def _persist(self) -> None:
        """``ctx.persist()``: the gate's state is durable when it returns, or it raises — a
        trigger about to make an external call (a dispatch) must not make it otherwise."""
        try:
            await self.writer.persist_intent()
        except RunTakenOverError:
            raise
        except StateError as exc:
            raise StateError(f"the gate's state could not be made durable ({exc})") from None

    async def check(self, spec: TargetSpec, ctx: Context) -> GateVerdict:
        wait = spec.wait
        assert wait is not None
        now = self.clock.now_ms()
        wctx = self.context(spec, now)
        prior = self.writer.row(spec.name).waiting_for
        if prior is not None and prior.failed is not None:  # decided: its holder settles it
            return GateVerdict("waiting", waiting_for=prior)
        try:
            result = await ask(wait.trigger, wctx)
        except RunTakenOverError as exc:  # not a flaky trigger: this process must stop
            raise BodyFailure(f"gate {spec.name!r} was not checked further: {exc}") from None
        except Exception as exc:
            message, _ = describe(exc)
            detail = self.state.redactor.text(f"the trigger raised {message}")
            self.warn(f"gate {spec.name}: {detail}; it stays waiting")
            result = NotYet(detail)
        if isinstance(result, Satisfied):
            return GateVerdict("passed")
        if isinstance(result, WaitFailed):
            return self._failed(wait, wctx, now, self.state.redactor.text(result.reason))
        reason = self.state.redactor.text(result.reason) if result.reason else None
        row = waiting_row(wait, deadline_ms=wctx.deadline_ms, checked_ms=now, detail=reason)
        return GateVerdict("waiting", waiting_for=row)

    def _failed(self, wait: WaitSpec, wctx: WaitContext, now: int, reason: str) -> GateVerdict:
        """The trigger failed: ``on_failure("fail")`` fails the gate; ``"cancel-run"`` fails it
        and cancels the run here (compensations walk as for any cancel); a target disposition
        parks the gate with its failure recorded, so the run suspends and its next holder
        (the same command at once, or a sweep) runs the target under the run's lease."""
        if wait.on_failure_is_target:
            row = waiting_row(wait, deadline_ms=wctx.deadline_ms, checked_ms=now, detail=reason,
                              failed=reason)  # fmt: skip
            return GateVerdict("waiting", waiting_for=row)
        if wait.on_failure == "cancel-run" and self.cancel is not None:
            self.cancel(f"gate {wctx.target!r} failed: {reason}")
        return GateVerdict("failed", error=reason)


class EffectDriver:
    """Drives a target's effects after its body (the scheduler's ``effects`` hook)."""

    def __init__(self, *, writer: RunStateWriter, clock: Clock, pool: ThreadPoolExecutor) -> None:
        self.writer = writer
        self.clock = clock
        self.pool = pool

    async def run(self, spec: TargetSpec, ctx: Context) -> None:
        for name, body in spec.effects:
            recorded = self.writer.row(spec.name).effects.get(name)
            if recorded is not None and recorded.status == "done":
                continue  # completed in an earlier process: never again
            now = iso(self.clock.now_ms())
            attempts = 1 if recorded is None else recorded.attempts + 1
            intent = EffectRecord(
                status="pending",
                intent_at=recorded.intent_at if recorded and recorded.intent_at else now,
                attempts=attempts,
            )
            self.writer.set_effect(spec.name, name, intent)
            # The intent is durable (fsynced) under the run's lease before the body runs, or
            # the body does not run.
            try:
                await self.writer.persist_intent()
            except RunTakenOverError as exc:
                raise BodyFailure(f"effect {name!r} was not run: {exc}") from None
            except StateError as exc:
                raise BodyFailure(
                    f"effect {name!r} was not run: its intent could not be recorded ({exc})"
                ) from None
            try:
                await call_body(body, ctx, self.pool)
            except Exception as exc:
                message, detail = describe(exc)
                failed = replace(intent, status="failed", error=self.writer.redactor.text(message))
                self.writer.set_effect(spec.name, name, failed)
                raise BodyFailure(f"effect {name!r} failed: {message}", detail) from None
            done = replace(intent, status="done", done_at=iso(self.clock.now_ms()))
            self.writer.set_effect(spec.name, name, done)
