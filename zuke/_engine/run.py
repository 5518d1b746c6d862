"""``execute_async()``: one run of a build in this process, from parameters to verdict.

(The public ``zuke.execute()`` is :func:`zuke.runs.owner.execute`: this run, then its
continuation when a signal became due while it ran — what every owner does.)

The pipeline: resolve parameters → instantiate the build and run its target
definitions → freeze and validate the graph → resolve ordering edges → plan →
schedule → verdict. Every step before scheduling raises (a usage or definition
error, nothing has run); from scheduling on, failures are outcomes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from zuke._build import Build, parameters
from zuke._duration import parse_duration
from zuke._engine.context import RunState
from zuke._engine.drive import drive
from zuke._engine.loading import LoadedBuild as LoadedBuild  # callers import it from here
from zuke._engine.loading import load as load
from zuke._engine.options import RunOptions as RunOptions  # callers import it from here
from zuke._engine.plan import BuildGraph, Plan, make_plan, requires_state
from zuke._engine.preflight import preflight
from zuke._engine.result import RunResult
from zuke._errors import BuildDefinitionError, UsageError, ZukeError
from zuke._provenance import Actor
from zuke._provenance import resolve as resolve_actor
from zuke._target import Target

if TYPE_CHECKING:
    from zuke._engine.durable import DurableRun
    from zuke._reporting import RunReporter
    from zuke.state._protocol import StateStore

#: what names a store in the environment (:func:`zuke.state.resolve.configured_store`)
_STORE_VARIABLES = ("ZUKE_STATE_URL", "ZUKE_STATE_DIR", "ZUKE_STATE")


def stateless(
    override: StateStore | None, env: Mapping[str, str], plan: Plan, *, required: bool
) -> bool:
    """Whether the run certainly has no store — decided before the durable side
    (:mod:`zuke._engine.durable`, its claims, writer and gates) is imported, which a run
    without a store never needs. ``False`` leaves the decision to
    :func:`~zuke._engine.durable_open.open_run` (which may still find no store, or
    refuse a run that needs one under ``ZUKE_STATE=off``)."""
    if override is not None:
        return False
    if env.get("ZUKE_STATE", "") == "off":
        return not any(requires_state(spec) for spec in plan.specs.values())
    if required or any(env.get(name, "") for name in _STORE_VARIABLES):
        return False
    # ``durable_open.needs_state``: a fan-out keeps a record even without ``--state``.
    return not any(requires_state(s) or s.fan_out is not None for s in plan.specs.values())


def new_run_id() -> str:
    """A random (version 4) UUID as text, what ``str(uuid.uuid4())`` gives — without
    importing ``uuid``, which loads ``platform`` (2 ms of every run's start-up)."""
    b = bytearray(os.urandom(16))
    b[6] = (b[6] & 0x0F) | 0x40  # version 4
    b[8] = (b[8] & 0x3F) | 0x80  # the RFC 4122 variant
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def check_targets(graph: BuildGraph, names: Sequence[str], what: str = "target") -> None:
    for name in names:
        if name not in graph.specs:
            import difflib  # only for a typo: not a cost of every run

            close = difflib.get_close_matches(name, list(graph.specs), n=1)
            hint = f' Did you mean "{close[0]}"?' if close else " Run --list to see the targets."
            raise UsageError(f"Unknown {what}: {name}.{hint}")


async def ordering_edges(build: Build, graph: BuildGraph) -> list[tuple[Target, Target]]:
    handles = {name: Target(name) for name in graph.specs}
    try:
        edges = list(build.extra_edges())
        edges += list(await build.order_with(handles))
    except ZukeError:
        raise
    except Exception as exc:
        raise BuildDefinitionError(f"Failed to resolve ordering edges: {exc}") from exc
    return edges


async def execute_async(build_cls: type[Build], options: RunOptions) -> RunResult:
    """Run ``options.targets`` of ``build_cls`` and their dependencies."""
    started = time.perf_counter()
    if not options.targets:
        raise UsageError("No target given. Run --list to see the targets.")
    loaded = load(build_cls, options.params, options.env)
    with preflight(loaded.redactor):
        deadline = loaded.build.deadline()
        if deadline is not None:
            parse_duration(deadline, what="Build.deadline()")  # a bad value fails before anything
        graph = loaded.graph
        check_targets(graph, options.targets)
        check_targets(graph, options.skip, what="target in --skip")
        edges = await ordering_edges(loaded.build, graph)
        plan = make_plan(graph, options.targets, skip=options.skip, ordering=edges)
        override = loaded.build.state_store()
    run_id = new_run_id()
    given = options.actor
    starter = given if isinstance(given, Actor) else resolve_actor(given, options.env)
    state = RunState(
        run_id=run_id,
        actor=starter.name,
        actor_source=starter.source,
        redactor=loaded.redactor,
        params=loaded.public_params,
    )
    secret_names = {p.name for p in parameters(build_cls) if p.is_secret}
    durable: DurableRun | None = None
    reporters: list[RunReporter] = []
    if not stateless(override, options.env, plan, required=options.state):
        from zuke._engine.durable_open import open_run  # the record, lease and locks: ~10 ms
        from zuke._engine.reporters import reporters_of

        with preflight(loaded.redactor):  # a bad reporter is refused before any record
            reporters = reporters_of(loaded.build)

        durable = await open_run(
            build_name=build_cls.__name__,
            override=override,
            deadline=deadline,
            plan=plan,
            roots=list(options.targets),
            params={
                k: loaded.redactor.text(v)
                for k, v in loaded.resolution.raw.items()
                if k not in secret_names
            },
            state=state,
            env=options.env,
            clock=options.clock,
            required=options.state,
            cwd=options.cwd,
            warn=options.on_warning,
            loop_is_the_runs=options.inline,
        )
    return await drive(plan, state=state, durable=durable, options=options, started=started,
                       reporters=reporters)  # fmt: skip
