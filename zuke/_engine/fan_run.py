"""A fan-out target's own run: materialise, run the batch, honour the target's settings.

The fan-out target is a target like any other, and its own settings apply
to the batch as a whole (the original ignores them):

* ``lock(...)`` is held from before the first item starts until the last
  one has returned; a lost claim stops the run, as for a body;
* ``timeout(d)`` bounds the whole batch: when it passes, no item starts, the
  stages in flight are told to stop (and waited for), and the fan-out fails;
* ``retry(n, delay)`` runs the failed items again, from their failed stage —
  items that succeeded are not repeated, and an item an earlier process of the
  run recorded failed stays failed (the retries were that process's);
* ``proceed_after_failure()`` lets the run pass although items failed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from zuke._duration import format_duration
from zuke._engine.batch import Batch, BatchResult
from zuke._engine.executor import settle
from zuke._engine.fan_out import FanOutError, Item, materialise
from zuke._engine.hooks import GateVerdict
from zuke._engine.observer import FanOutProgress
from zuke._engine.plan import TargetSpec, requires_state
from zuke._engine.result import Outcome
from zuke._errors import ZukeError
from zuke._lock_settings import check_lock

if TYPE_CHECKING:
    from zuke._engine.fan_host import FanHost
    from zuke._engine.hooks import Held


async def run_fan_out(s: FanHost, spec: TargetSpec, held: Held | None) -> GateVerdict:
    """Run the fan-out ``spec``; its verdict: passed, waiting (items parked) or failed."""
    try:
        items = await materialise(spec)
        _check_stages(s, spec, items)
    except ZukeError as exc:
        return GateVerdict("failed", error=s.state.redactor.text(str(exc)))
    _register(s, items)
    if not items:
        await s.observer.fan_out(FanOutProgress(spec.name, 0, 0, 0, 0, finished=True))
        return GateVerdict("passed")
    work = asyncio.ensure_future(_attempts(s, spec, items))
    if held is None:
        await settle(work)
    else:
        await _while_held(s, work, held)
    result = work.result()
    if s.cancel_requested.is_set():
        done = result.count("succeeded")
        return GateVerdict(
            "failed", error=f"cancelled before its items finished ({done} of {len(items)} done)"
        )
    waiting = result.count("waiting")
    error = result.error(len(items))
    if error is not None and (result.stopped_by or not waiting):
        return GateVerdict("failed", error=error)
    if waiting:
        return GateVerdict("waiting", error=f"{waiting} of {len(items)} item(s)")
    return GateVerdict("passed")


def _check_stages(s: FanHost, spec: TargetSpec, items: list[Item]) -> None:
    """Before any item runs: every stage's lock settings are valid, and a run without a
    store (``ZUKE_STATE=off``) has no stage that needs one — a locked stage never runs
    unlocked."""
    for item in items:
        for stage in item.stages:
            if stage.lock is not None:
                check_lock(stage.name, stage.lock, s.state.redactor)
            if s.guard is None and requires_state(stage):
                raise FanOutError(
                    f"fan-out {spec.name!r}: stage {stage.name} uses .lock(), .waits_for(), "
                    ".effect() or .on_cancel(), which need a state store, but this run has "
                    "none (ZUKE_STATE=off); unset ZUKE_STATE to run it"
                )


def _register(s: FanHost, items: list[Item]) -> None:
    for item in items:
        for stage in item.stages:
            s.specs[stage.name] = stage


async def _attempts(s: FanHost, spec: TargetSpec, items: list[Item]) -> BatchResult:
    """Run the batch; with ``retry``, run its failed items again (from their failed stage)."""
    prior: dict[str, Outcome] = dict(s.earlier)
    todo = items
    result = BatchResult()
    for attempt in range(spec.retries + 1):
        batch = Batch(s, spec, todo, prior=prior)
        timer = _arm_timeout(s, spec, batch)
        try:
            got = await batch.run()
        finally:
            if timer is not None:
                timer.cancel()
        result.ends.update(got.ends)
        result.failed_stage.update(got.failed_stage)
        result.stopped_by = got.stopped_by
        failed = [
            i
            for i in todo
            if got.ends.get(i.key) in ("failed", "skipped") and i.key not in got.settled_before
        ]
        if not failed or attempt == spec.retries or s.cancel_requested.is_set() or batch.timed_out:
            break
        s.notify(
            f"{spec.name}: {len(failed)} item(s) did not succeed; trying them again "
            f"({attempt + 1} of {spec.retries})"
        )
        # What succeeded stays done; what failed or was skipped runs again.
        prior = {n: o for n, o in s.outcomes.items() if o.status == "succeeded"}
        for item in failed:
            for name in item.names:
                if name not in prior:
                    s.outcomes.pop(name, None)
            result.failed_stage.pop(item.key, None)
        todo = failed
        if spec.retry_delay_ms:
            await asyncio.sleep(spec.retry_delay_ms / 1000)
    return result


def _arm_timeout(s: FanHost, spec: TargetSpec, batch: Batch) -> asyncio.TimerHandle | None:
    if spec.timeout_ms is None:
        return None

    def expire() -> None:
        batch.time_out(f"{spec.name} timed out after {format_duration(spec.timeout_ms or 0)}")
        for name in batch.in_flight():
            body = s._bodies.get(name)
            if body is not None:
                body.cancel()  # an async body stops; a sync one is told (ctx.cancelled)

    return asyncio.get_running_loop().call_later(spec.timeout_ms / 1000, expire)


async def _while_held(s: FanHost, work: asyncio.Future[BatchResult], held: Held) -> None:
    """Wait for the batch; if the fan-out's own claim is lost meanwhile, stop the run."""
    lost: asyncio.Future[object] = asyncio.ensure_future(held.lost.wait())
    waiting: list[asyncio.Future[object]] = [work, lost]  # type: ignore[list-item]
    try:
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
    finally:
        lost.cancel()
    if not work.done():
        s.abort(held.loss_message())  # the drain stops the items' bodies; wait for them
        with contextlib.suppress(Exception):
            await settle(work)
