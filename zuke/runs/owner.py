"""Running a build as its owner: the run, then — if it suspended while a signal one of its
gates waits for was stored, or with a gate's failure recorded for its next holder — its
continuation, at once, in this process.

A signal delivered while another branch of the run still runs is stored (an append, no
lease) and the deliverer is told the running run takes it. The process that suspends the
run looks again after letting go of its lease and continues the run if such a signal is
due (:func:`~zuke.runs.continuation.continue_due`). Every owner goes through here — the
command line, ``zuke mcp``'s ``run_target`` and :func:`zuke.execute` — so none of them
leaves a run parked with its signal stored. (``execute()`` once lived in the engine, which
may not import this layer, and so did not look again.)
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from zuke._build import Build
from zuke._engine.observer import Observer
from zuke._engine.result import RunResult
from zuke._engine.run import RunOptions, execute_async
from zuke._provenance import resolve_actor

if TYPE_CHECKING:
    from zuke.state._protocol import StateStore


async def continue_if_due(
    build_cls: type[Build],
    result: RunResult,
    options: RunOptions,
    *,
    store: StateStore | None = None,
) -> RunResult:
    """``result`` of a run this process just drove; when it suspended with something due
    (a signal stored while it ran, a gate's recorded failure), the result of continuing it
    here. ``store``: the run's (default: the one the run's settings name)."""
    if result.status != "suspended" or not result.recorded or result.record_error is not None:
        return result
    from zuke.runs.continuation import continue_due  # only a suspended run needs the lifecycle
    from zuke.runs.store import open_store

    chosen = store if store is not None else open_store(options.env, build=build_cls,
                                                        cwd=options.cwd)  # fmt: skip
    actor = resolve_actor(options.actor, options.env)
    outcome = await continue_due(build_cls, chosen, result.run_id, options, actor=actor)
    if outcome is None:
        return result
    if outcome.result is not None:
        return outcome.result
    # Settled without driving anything (a failed gate's "fail" or "cancel-run"): the run's
    # status is the outcome's, and nothing waits any more.
    status = outcome.status if outcome.status in ("succeeded", "failed", "cancelled") else None
    if status is None:
        return result
    said = outcome.notes[-1] if outcome.handled and outcome.notes else None
    return replace(result, status=status, waiting={}, settled_by=said)  # type: ignore[arg-type]


async def run_owned(
    build_cls: type[Build], options: RunOptions, *, store: StateStore | None = None
) -> RunResult:
    """Run ``options.targets`` and continue the run at once if something became due."""
    result = await execute_async(build_cls, options)
    return await continue_if_due(build_cls, result, options, store=store)


def execute(
    build_cls: type[Build],
    targets: Sequence[str],
    *,
    params: Mapping[str, str | Sequence[str]] | None = None,
    env: Mapping[str, str] | None = None,
    skip: Sequence[str] = (),
    parallel: int = 1,
    actor: str | None = None,
    observers: Sequence[Observer] = (),
) -> RunResult:
    """Run targets of a build in this process and return the result (no printing); a
    signal delivered while the run ran is consumed before it returns, as on the CLI."""
    supplied = {k: [v] if isinstance(v, str) else list(v) for k, v in (params or {}).items()}
    options = RunOptions(
        targets=list(targets),
        params=supplied,
        env=dict(os.environ) if env is None else env,
        skip=list(skip),
        parallel=parallel,
        actor=actor,
        observers=observers,
        inline=True,  # asyncio.run below: the loop is the run's alone
    )
    return asyncio.run(run_owned(build_cls, options))


__all__ = ["continue_if_due", "execute", "run_owned"]
