"""The builds the simulation runs: one shape, its features switched on per seed.

``deploy → gates (signals, a GitHub-like workflow) → promote → release``, with
``lint`` an independent branch of ``release``. ``deploy`` may hold a lock (or keep it
until ``promote``, across the gates: ``held_until``), run an
effect and have a compensation; a gate may time out into ``fail``, ``cancel-run``
or a ``rollback`` target. Every body reports to :class:`~tests.sim.invariants.Invariants`
and spends simulated time (``asyncio.sleep`` on the actor's loop), so other actors
move while it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.sim.invariants import Invariants
from zuke import Build, external_signal, parameter, target
from zuke._target import TargetBuilder
from zuke._waits import NotYet, Satisfied, WaitContext, WaitResult, WaitSettings, WaitTrigger
from zuke.state._protocol import StateStore

LOCK_KEY = "prod"
#: the secret parameter's value (from the environment as ``TOKEN``): never in a record
SECRET = "s3cr3t-sim-token-4711"


@dataclass(frozen=True)
class Shape:
    """Which features a seed's build has."""

    signals: tuple[str, ...] = ("a",)
    workflow: bool = False
    rate_limit_first: bool = True
    gate_timeout: str | None = None
    #: "fail", "cancel-run" or "rollback"
    on_timeout: str = "fail"
    #: the on_timeout hook's duration (sim s) for the workflow gate
    hook_s: float = 1.0
    #: how long a dispatched workflow runs before it completes (sim ms)
    workflow_ms: int = 20_000
    lock_ttl: str | None = None
    #: the lock is the run's (``held_until(promote)``): kept across the gates
    held: bool = False
    deploy_s: float = 5.0
    effect: bool = False
    compensate: bool = False
    #: the build's ``order_with`` takes this long (sim s): a remote lookup while loading
    order_s: float = 0.0
    #: ``Build.deadline()``
    deadline: str | None = None
    #: a fan-out ``batch`` after ``deploy`` (and before ``promote``) over these items, each
    #: an ``approve`` gate waiting for its own signal (:func:`item_signal`), then ``ship``
    items: tuple[str, ...] = ()

    def all_signals(self) -> tuple[str, ...]:
        return (*self.signals, *(item_signal(item) for item in self.items))

    def gates(self) -> list[str]:
        return [f"gate_{s}" for s in self.signals] + (["ci"] if self.workflow else [])


def item_signal(item: str) -> str:
    """The signal an item's ``approve`` gate waits for (``go-x`` for item ``x``)."""
    return f"go-{item}"


def item_gate(item: str) -> str:
    """The recorded name of an item's gate (docs/fan-out.md: ``parent[item].stage``)."""
    return f"batch[{item}].approve"


class SimWorkflow(WaitTrigger):
    """A GitHub-like trigger: persists its marker, then dispatches (as ``zuke_gh`` does)."""

    def __init__(self, inv: Invariants, shape: Shape) -> None:
        self.inv = inv
        self.shape = shape

    @property
    def descriptor(self) -> str:
        return "sim-github:ci"

    async def check(self, ctx: WaitContext) -> WaitResult:
        state = ctx.state.get()
        if state.get("done"):
            return Satisfied()
        marker = state.get("marker")
        if not isinstance(marker, str):
            attempt = self.inv.new_attempt()
            ctx.state.set({"marker": attempt, "dispatchedAt": ctx.now_ms})
            await ctx.persist()  # durable BEFORE the dispatch
            landed = self.inv.dispatch(
                ctx.run_id, ctx.target, attempt, rate_limit_first=self.shape.rate_limit_first
            )
            if not landed:  # rate limited: GitHub did nothing, the dispatch is owed
                ctx.state.set({"marker": None, "dispatchedAt": None})
                await ctx.persist()
                return NotYet("the dispatch was rate limited")
            return NotYet("dispatched")
        at = state.get("dispatchedAt")
        if isinstance(at, int) and ctx.now_ms >= at + self.shape.workflow_ms:
            ctx.state.set({"done": True})
            return Satisfied()
        return NotYet("the workflow runs")

    async def on_timeout(self, ctx: WaitContext) -> None:
        self.inv.hook(ctx.run_id, ctx.target)
        await asyncio.sleep(self.shape.hook_s)


def sim_build(shape: Shape, store: StateStore, inv: Invariants) -> type[Build]:
    """The build class for ``shape``, recording into ``store`` and reporting to ``inv``."""

    async def deploy_body(ctx: Any) -> None:
        run = inv.enter(ctx.run_id, "deploy", ctx.lock)
        try:
            await asyncio.sleep(shape.deploy_s)
            if not inv.act(run):
                raise RuntimeError("the deploy API refused a stale fence")
        finally:
            inv.exit(run)

    async def notify(ctx: Any) -> None:
        inv.effect(ctx.run_id, "deploy", "notify")
        await asyncio.sleep(1)

    def simple(name: str, seconds: float = 1.0) -> Callable[[Any], Any]:
        async def body(ctx: Any) -> None:
            run = inv.enter(ctx.run_id, name)
            try:
                await asyncio.sleep(seconds)
                inv.act(run)
            finally:
                inv.exit(run)

        return body

    async def undeploy_body(ctx: Any) -> None:
        inv.compensation(ctx.run_id, "deploy")
        await asyncio.sleep(2)
        inv.compensated(ctx.run_id, "deploy")

    def gate_settings(trigger: WaitTrigger, build: Build) -> Callable[[WaitSettings], Any]:
        def configure(s: WaitSettings) -> Any:
            s = s.on(trigger)
            if shape.gate_timeout is not None:
                s = s.timeout(shape.gate_timeout)
                if shape.on_timeout == "rollback":
                    s = s.on_timeout(build.rollback)  # type: ignore[attr-defined]
                else:
                    s = s.on_timeout(shape.on_timeout)  # type: ignore[arg-type]
            return s

        return configure

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        t = t.executes(deploy_body)
        if shape.lock_ttl is not None:
            ttl = shape.lock_ttl
            if shape.held:
                t = t.lock(lambda s: s.key(LOCK_KEY).with_ttl(ttl).held_until(self.promote))  # type: ignore[attr-defined]
            else:
                t = t.lock(lambda s: s.key(LOCK_KEY).with_ttl(ttl))
        if shape.effect:
            t = t.effect("notify", notify)
        if shape.compensate:
            t = t.on_cancel(self.undeploy)  # type: ignore[attr-defined]
        return t

    def undeploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(undeploy_body)

    def lint(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(simple("lint"))

    async def promote_body(ctx: Any) -> None:
        if shape.held:  # the run still keeps the key its deploy took
            inv.held_enter(ctx.run_id, LOCK_KEY)
        await simple("promote")(ctx)

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        gates = [getattr(self, name) for name in shape.gates()]
        if shape.items:
            gates.append(self.batch)  # type: ignore[attr-defined]
        return t.depends_on(*gates).executes(promote_body)

    def stages(item: str, index: int) -> dict[str, Any]:
        def approve(s: WaitSettings) -> Any:
            return s.on(external_signal(item_signal(item)))

        return {"approve": target().waits_for(approve),
                "ship": target().executes(simple(f"batch[{item}].ship"))}  # fmt: skip

    def batch(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.deploy).for_each(lambda: list(shape.items), stages)  # type: ignore[attr-defined]

    def release(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.promote, self.lint)  # type: ignore[attr-defined]

    def rollback(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(simple("rollback"))

    async def order_with(self: Build, targets: Any) -> list[Any]:
        if shape.order_s:
            await asyncio.sleep(shape.order_s)
        return []

    namespace: dict[str, Any] = {
        "service": parameter("the service").default("api"),
        "token": parameter("a secret").secret(),
        "state_store": lambda self: store,
        "deadline": lambda self: shape.deadline,
        "order_with": order_with,
    }
    for fn in (deploy, undeploy, lint, promote, release, rollback):
        namespace[fn.__name__] = target(fn)
    if shape.items:
        namespace["batch"] = target(batch)

    def gate(trigger: Callable[[], WaitTrigger]) -> Any:
        def define(self: Build, t: TargetBuilder) -> TargetBuilder:
            configure = gate_settings(trigger(), self)
            return t.depends_on(self.deploy).waits_for(configure)  # type: ignore[attr-defined]

        return target(define)

    for signal in shape.signals:
        namespace[f"gate_{signal}"] = gate(lambda signal=signal: external_signal(signal))  # type: ignore[misc]
    if shape.workflow:
        namespace["ci"] = gate(lambda: SimWorkflow(inv, shape))
    return type("SimRelease", (Build,), namespace)
