"""The actors: each one a process driving zuke's real code paths against the shared store.

An actor's function runs on its own thread (see :meth:`tests.sim.runtime.Sim.spawn`)
and calls what the CLI, the sweep and the MCP server call — never a re-implementation.
Its value (a result, or the :class:`~zuke.ZukeError` it ended with) is kept on the actor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.sim.liveness import DRAIN_EVERY_MS, DRAIN_SWEEPS
from zuke._engine.run import RunOptions
from zuke._errors import AlreadyResumedError, RunNotSuspendedError, ZukeError
from zuke.mcp.tools import BuildTools
from zuke.runs.cancel import cancel_run
from zuke.runs.owner import execute, run_owned
from zuke.runs.resume import ResumeOptions, SignalDelivery, resume_run_async
from zuke.runs.sweep import resume_check_async
from zuke.state.records import TERMINAL_STATUSES

if TYPE_CHECKING:
    from tests.sim.world import World

KINDS = ("owner", "resumer", "sweeper", "canceller", "mcp-show", "mcp-cancel", "mcp-resume",
         "drainer")  # fmt: skip


@dataclass(frozen=True)
class ActorSpec:
    """Who an actor is, when it starts (sim ms after the start) and what it does."""

    name: str
    kind: str
    start_ms: int = 0
    #: the owner whose run it acts on
    run_of: str = "owner"
    signal: str | None = None
    data: Any = None
    #: the scheduler may crash, stall or cut it off
    faultable: bool = False
    #: a sweeper sweeps this many times, ``every_ms`` apart (a cron job)
    repeat: int = 1
    every_ms: int = 30_000
    #: an owner runs the build as ``zuke run`` does ("cli": the run, then its continuation
    #: if a signal came while it ran) or through the library call ``zuke.execute()``
    via: str = "cli"


def _options(world: World, name: str, **changes: Any) -> RunOptions:
    values: dict[str, Any] = {"env": dict(world.env), "clock": world.clock, "actor": name}
    values.update(changes)
    return RunOptions(**values)


def _tools(world: World, name: str) -> BuildTools:
    return BuildTools(
        build=world.build, env=dict(world.env), actor=name, describe=lambda graph, params: {},
        clock=world.clock, warn=lambda message: None, store=world.store,
    )  # fmt: skip


def refused(world: World, run_id: str, exc: BaseException) -> bool:
    """Whether a failed delivery was refused for a reason the design allows (the run
    ended or is being cancelled, the signal came late or is unknown, no store)."""
    if isinstance(exc, (AlreadyResumedError, RunNotSuspendedError)):
        # "being resumed by ...", "is running": the signal must be stored all the same,
        # unless the run ended or is being cancelled
        record = world.inv.record(run_id)
        return record is None or record.status in (*TERMINAL_STATUSES, "cancelling")
    return True


def body(world: World, spec: ActorSpec) -> Callable[[], Any]:
    """The function the actor's main thread runs."""
    name = spec.name

    def owner() -> Any:
        if spec.via == "execute":  # the library call: its own options, the build's store
            return execute(world.build, ["release"], env=dict(world.env), actor=name)
        options = _options(world, name, targets=["release"])
        return asyncio.run(run_owned(world.build, options))

    def run_id() -> str:
        found = world.run_of(spec.run_of)
        assert found is not None
        return found

    def resumer() -> Any:
        rid, signal = run_id(), spec.signal
        assert signal is not None
        resume = ResumeOptions(signal=SignalDelivery(signal, spec.data), actor=name)
        try:
            outcome = asyncio.run(
                resume_run_async(world.build, world.store, rid, resume, _options(world, name))
            )
        except ZukeError as exc:
            world.inv.delivered(rid, signal, type(exc).__name__, refused=refused(world, rid, exc))
            return exc
        world.inv.delivered(rid, signal, outcome.action, refused=outcome.action == "timed-out")
        return outcome

    def sweeper() -> Any:
        resume = ResumeOptions(actor=name)
        reports = []
        for i in range(spec.repeat):
            if i:
                world.sim.sleep(spec.every_ms / 1000)
            if i and world.all_ended():
                break
            run = _options(world, name)
            sweep = resume_check_async(world.build, world.store, resume=resume, run=run)
            reports.append(asyncio.run(sweep))
        return reports

    def drainer() -> Any:  # the end of a seed: cron's sweeps, no faults (tests.sim.liveness)
        reports = []
        for i in range(DRAIN_SWEEPS):
            if i:
                world.sim.sleep(DRAIN_EVERY_MS / 1000)
            if world.all_settled():
                break
            run = _options(world, name)
            sweep = resume_check_async(world.build, world.store, resume=ResumeOptions(actor=name),
                                       run=run)  # fmt: skip
            reports.append(asyncio.run(sweep))
        return reports

    def canceller() -> Any:  # what `zuke cancel RUN` does, with the build file at hand
        return cancel_run(
            world.store, run_id(), actor=name, build_name=world.build.__name__,
            clock=world.clock, wait_ms=0, build=world.build, env=dict(world.env),
        )  # fmt: skip

    def mcp_show() -> Any:
        return asyncio.run(_tools(world, name).show_run(run_id()))

    def mcp_cancel() -> Any:
        return asyncio.run(_tools(world, name).cancel_run(run_id(), wait="0s"))

    def mcp_resume() -> Any:
        rid, signal = run_id(), spec.signal
        assert signal is not None
        try:
            result = asyncio.run(_tools(world, name).resume_run(rid, signal=signal, data=spec.data))
        except ZukeError as exc:  # a ToolFailure: what the library raised is its context
            cause = exc.__context__ or exc
            world.inv.delivered(rid, signal, type(cause).__name__,
                                refused=refused(world, rid, cause))  # fmt: skip
            return exc
        world.inv.delivered(rid, signal, result["action"], refused=result["action"] == "timed-out")
        return result

    kinds: dict[str, Callable[[], Any]] = {
        "owner": owner, "resumer": resumer, "sweeper": sweeper, "canceller": canceller,
        "mcp-show": mcp_show, "mcp-cancel": mcp_cancel, "mcp-resume": mcp_resume,
        "drainer": drainer,
    }  # fmt: skip
    return kinds[spec.kind]
