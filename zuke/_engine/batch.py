"""Running one fan-out: its items concurrently, each item's stages in order.

The fan-out target's task runs a :class:`Batch`. Up to ``concurrency`` items
run at once with no barrier between them: an item starts its next stage as
soon as its stage before succeeded, and a new item starts as soon as one
ends. Every stage is a full target run by the scheduler's own path (its
``running`` row, lock, timeout, retry, gate, effects, record row), so an
item's stage is recorded, locked and compensated like any target.

Failures: a failed stage skips the rest of its item. Without
``continue_on_item_failure`` it also stops the batch — no further item
starts, and items in flight stop after the stage they are in. A stage that
is a gate parks its item; the batch then waits (and the run suspends) while
nothing stopped it. Stages an earlier process of the run settled are not run
again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from zuke._engine.fan_out import Item
from zuke._engine.observer import FanOutProgress
from zuke._engine.plan import TargetSpec
from zuke._engine.result import Outcome

if TYPE_CHECKING:
    from zuke._engine.fan_host import FanHost

ItemEnd = Literal["succeeded", "failed", "waiting", "skipped"]
#: how many failed items a fan-out's error names before it counts the rest
_NAMED = 3


@dataclass
class BatchResult:
    """How the batch ended: per-item ends, and why it stopped early (if it did)."""

    ends: dict[str, ItemEnd] = field(default_factory=dict)
    failed_stage: dict[str, str] = field(default_factory=dict)
    stopped_by: str | None = None
    #: items whose failure an earlier process recorded: final, never retried here
    settled_before: set[str] = field(default_factory=set)

    def count(self, end: ItemEnd) -> int:
        return sum(1 for e in self.ends.values() if e == end)

    def error(self, total: int) -> str | None:
        """The fan-out's failure message, or ``None`` if no item failed or was left out."""
        failed = [k for k, e in self.ends.items() if e == "failed"]
        if not failed and not self.stopped_by:
            return None
        named = ", ".join(f"{k} ({self.failed_stage.get(k, '?')})" for k in failed[:_NAMED])
        more = f" and {len(failed) - _NAMED} more" if len(failed) > _NAMED else ""
        text = f"{len(failed)} of {total} item(s) failed: {named}{more}" if failed else ""
        if self.stopped_by:
            text = f"{text}; " if text else ""
            text += f"the batch stopped: {self.stopped_by}"
        return text


class Batch:
    """One run of a fan-out's items (one attempt of the fan-out target)."""

    def __init__(
        self,
        scheduler: FanHost,
        spec: TargetSpec,
        items: list[Item],
        *,
        prior: Mapping[str, Outcome],
    ) -> None:
        assert spec.fan_out is not None
        self.s = scheduler
        self.spec = spec
        self.items = items
        #: outcomes earlier processes (or earlier attempts) settled: not run again
        self.prior = prior
        self.result = BatchResult()
        self._started: dict[str, float] = {}
        #: the stage each running item is in
        self._current: dict[str, str] = {}
        self._stop: str | None = None
        self.timed_out = False

    def stop(self, reason: str) -> None:
        """No new item starts; items in flight stop after their current stage."""
        if self._stop is None:
            self._stop = reason
            self.result.stopped_by = reason

    def time_out(self, reason: str) -> None:
        """The fan-out's own timeout passed: stop, and fail even items that were not reached."""
        self.timed_out = True
        self.stop(reason)

    def in_flight(self) -> list[str]:
        """The stages running now."""
        return list(self._current.values())

    @property
    def halted(self) -> str | None:
        if self.s.cancel_requested.is_set():
            return self.s.stop_reason or self.s.cancel_reason or "the run was cancelled"
        return self._stop

    async def run(self) -> BatchResult:
        fan = self.spec.fan_out
        assert fan is not None
        queue = list(reversed(self.items))
        running: dict[asyncio.Task[ItemEnd], Item] = {}
        await self._progress()
        while queue or running:
            while queue and len(running) < fan.concurrency and self.halted is None:
                item = queue.pop()
                self._started[item.key] = time.perf_counter()
                running[asyncio.ensure_future(self._item(item))] = item
            if not running:
                break
            await self._progress()
            done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                item = running.pop(task)
                self._started.pop(item.key, None)
                self.result.ends[item.key] = task.result()
        for item in reversed(queue):  # never started: the batch stopped or was cancelled
            self.result.ends[item.key] = await self._skip_rest(item, 0, self.halted or "stopped")
        if self._stop is not None:
            await self._unpark_stopped()
        await self._progress(finished=True)
        return self.result

    async def _item(self, item: Item) -> ItemEnd:
        for position, stage in enumerate(item.stages):
            earlier = self.prior.get(stage.name)
            if earlier is not None and earlier.status == "succeeded":
                self.s.outcomes[stage.name] = earlier
                continue
            if earlier is not None and earlier.status in ("failed", "skipped"):
                # Settled by an earlier process: the item ended there, it is not run again
                # (nor retried: that process's retries were its own).
                self.s.outcomes[stage.name] = earlier
                self.result.settled_before.add(item.key)
                for later in item.stages[position + 1 :]:
                    if later.name in self.prior:
                        self.s.outcomes[later.name] = self.prior[later.name]
                self.result.failed_stage[item.key] = stage.name.rpartition(".")[2]
                return "failed"
            halted = self.halted
            if halted is not None:
                return await self._skip_rest(item, position, halted)
            self._current[item.key] = stage.name
            try:
                outcome = await self.s._run_target(stage.name)
            finally:
                self._current.pop(item.key, None)
            if outcome.status == "waiting":
                return "waiting"
            if outcome.status == "succeeded" or (
                outcome.status == "failed" and stage.proceed_after_failure
            ):
                continue
            self.result.failed_stage[item.key] = stage.name.rpartition(".")[2]
            await self._skip_rest(item, position + 1, f"{stage.name} did not succeed")
            fan = self.spec.fan_out
            if not self.s.cancel_requested.is_set() and not (fan and fan.continue_on_item_failure):
                self.stop(f"{stage.name} failed")
            await self._progress()
            return "failed"
        return "succeeded"

    async def _skip_rest(self, item: Item, start: int, reason: str) -> ItemEnd:
        for stage in item.stages[start:]:
            if stage.name not in self.s.outcomes:
                await self.s._settle_skipped(stage.name, reason)
        return "skipped"

    async def _unpark_stopped(self) -> None:
        """A stopped batch never resumes: its parked items' gates are settled skipped."""
        for item in self.items:
            if self.result.ends.get(item.key) != "waiting":
                continue
            for stage in item.stages:
                if stage.name in self.s.waiting:
                    del self.s.waiting[stage.name]
                if stage.name not in self.s.outcomes:
                    await self.s._settle_skipped(stage.name, f"the batch stopped: {self._stop}")
            self.result.ends[item.key] = "skipped"

    async def _progress(self, *, finished: bool = False) -> None:
        now = time.perf_counter()
        slowest = None
        if self._started:
            key, since = min(self._started.items(), key=lambda kv: kv[1])
            slowest = (key, (now - since) * 1000)
        ends = self.result
        await self.s.observer.fan_out(
            FanOutProgress(
                target=self.spec.name,
                total=len(self.items),
                succeeded=ends.count("succeeded"),
                failed=ends.count("failed"),
                running=len(self._started),
                waiting=ends.count("waiting"),
                slowest=slowest,
                finished=finished,
            )
        )
