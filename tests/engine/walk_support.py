"""Walking a run in-process, directly: a memory store, a manual clock, leases without
heartbeat threads (so a lease lapses only when the test moves the clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from zuke import Build, target
from zuke._clock import ManualClock
from zuke._engine.claims import Claim
from zuke._engine.plan import Plan, make_plan
from zuke._engine.run import load
from zuke._engine.walk import WalkResult, walk
from zuke._redact import Redactor
from zuke._target import TargetBuilder
from zuke.state._protocol import LockAcquired, LockHolder, lease_key
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord, TargetRecord

RUN = "run-1"
LEASE_TTL_MS = 60_000
AT = "2026-01-01T00:00:00.000Z"


class Crash(KeyboardInterrupt):
    """A process dying mid-compensation, as the walk sees it: nothing after it runs. (A
    body's other exceptions, ``BaseException`` ones included, are failures the walk
    records; an interrupt passes through.)"""


def chain_build(undo: Callable[[str], None]) -> type[Build]:
    """``deploy → migrate``, undone by ``undeploy`` and ``unmigrate``; each calls ``undo``
    with its own name (which may raise, or look at the store)."""

    class Chain(Build):
        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: None).on_cancel(self.undeploy)

        @target
        def migrate(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.deploy).executes(lambda: None).on_cancel(self.unmigrate)

        @target
        def undeploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: undo("undeploy"))

        @target
        def unmigrate(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda: undo("unmigrate"))

    return Chain


def plan_of(build: type[Build]) -> Plan:
    return make_plan(load(build, {}, {}).graph, ["migrate"])


def take_lease(store: MemoryStateStore, clock: ManualClock, actor: str) -> Claim:
    """The run's lease, taken by ``actor``; its heartbeat is not started."""
    holder = LockHolder(actor=actor, run_id=RUN, since=AT)
    taken = store.acquire_lock(lease_key(RUN), holder, LEASE_TTL_MS)
    assert isinstance(taken, LockAcquired), f"{actor} could not take the lease"
    return Claim(store, lease_key(RUN), taken.token, taken.fence, LEASE_TTL_MS,
                 on_lost=lambda claim: None, warn=lambda message: None, clock=clock)  # fmt: skip


def running_run(store: MemoryStateStore, lease: Claim) -> None:
    """A run whose deploy and migrate succeeded, owned by ``lease``."""
    record = RunRecord(
        id=RUN, build="Chain", root_target="migrate", status="running", actor="owner",
        created_at=AT, updated_at=AT,
        targets={"deploy": TargetRecord(status="succeeded"),
                 "migrate": TargetRecord(status="succeeded")},
        locks={lease_key(RUN): lease.token},
    )  # fmt: skip
    store.create_run(record)


async def walk_async(
    store: MemoryStateStore, clock: ManualClock, lease: Claim, plan: Plan, actor: str,
    notify: Callable[[str], None] = lambda message: None,
) -> WalkResult:  # fmt: skip
    return await walk(
        store, RUN, lease=lease, plan=plan, intended="cancelled", actor=actor, clock=clock,
        redactor=Redactor(), reason="cancelled by a test", notify=notify,
    )  # fmt: skip


def walk_now(
    store: MemoryStateStore, clock: ManualClock, lease: Claim, plan: Plan, actor: str,
    notify: Callable[[str], None] = lambda message: None,
) -> WalkResult:  # fmt: skip
    """One walk by ``actor`` under ``lease``, on a loop of its own."""
    return asyncio.run(walk_async(store, clock, lease, plan, actor, notify))


def record_of(store: MemoryStateStore) -> RunRecord:
    found = store.get_run(RUN)
    assert found is not None
    return found.record


def events(record: RunRecord, *tools: str) -> list[tuple[str, str, str]]:
    """(tool, target, outcome) of the walk's events."""
    return [(e.tool, e.args["target"], e.outcome) for e in record.events if e.tool in tools]
