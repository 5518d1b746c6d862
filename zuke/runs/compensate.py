"""The compensation walk of a run whose own process is gone, driven from another one.

``zuke cancel`` taking over a dead owner's run, the sweep finishing a walk a
crash interrupted (a ``cancelling`` run nobody drives), and a reaped run
past its deadline all end the same way: under the run's lease (taken by the
caller, renewed here while the walk lasts), the build is loaded with the
run's recorded parameters, its plan rebuilt with the ordering edges resolved
again, and :func:`zuke._engine.walk.walk` does the rest. The claims the
record still lists are then released with their recorded tokens.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

from zuke._build import Build
from zuke._clock import iso
from zuke._engine.gate_cancel import GateHooks
from zuke._engine.plan import Plan, make_plan
from zuke._engine.resumed import plan_of
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._engine.walk import WalkResult, walk
from zuke._errors import ZukeError
from zuke._redact import Redactor
from zuke.runs.lifecycle import Hold, live_claims, load_for
from zuke.state.records import RunEvent, RunRecord, RunStatus

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end from synchronous code, even inside a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="zuke-walk")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def gate_hooks(loaded: LoadedBuild, actor: str) -> GateHooks:
    """How a walk from another process asks the run's waiting gates (their ``on_cancel``):
    the build loaded with the run's parameters, ``actor`` cancelling."""
    return GateHooks(find=loaded.index.get, params=loaded.public_params,
                     redactor=loaded.redactor, resumed_by=actor)  # fmt: skip


async def plan_for(
    build: type[Build] | None, record: RunRecord, env: Mapping[str, str]
) -> tuple[Plan | None, Redactor, list[str], LoadedBuild | None]:
    """The run's plan for its walk (``None``: no compensations), its redactor, notes, and
    the build loaded with the run's parameters (``None``: it could not be)."""
    if build is None:
        return None, Redactor(), ["no build file here: cancelling without compensations"], None
    try:
        loaded = load_for(build, record, RunOptions(env=env))
    except ZukeError as exc:
        return (
            None,
            Redactor(),
            [f"cannot load the build ({exc}): cancelling without compensations"],
            None,
        )
    plan, redactor, notes = await _plan_loaded(loaded, record)
    return plan, redactor, notes, loaded


async def _plan_loaded(
    loaded: LoadedBuild, record: RunRecord
) -> tuple[Plan | None, Redactor, list[str]]:
    try:
        return await plan_of(loaded, record), loaded.redactor, []
    except ZukeError as exc:
        names = [n.name for n in record.graph if n.name in loaded.graph.specs]
        if not names:
            return (
                None,
                loaded.redactor,
                ["the run's targets are not in this build: no compensations"],
            )
        plan = make_plan(loaded.graph, names)
        return plan, loaded.redactor, [f"ordering edges failed ({exc}): walking the base order"]


async def walk_taken(
    hold: Hold,
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    actor: str,
    intended: RunStatus,
    reason: str,
    first: tuple[RunEvent, ...] = (),
    warn: Callable[[str], None] = lambda message: None,
    compensate: bool = True,
) -> tuple[WalkResult, list[str], list[str]]:
    """Walk the run ``hold`` holds (its heartbeat renews the lease; the caller releases it):
    its waiting gates told of the cancel, then — unless ``compensate`` is false — its
    compensations, with ``build`` (``None``: no build here, neither).

    Returns the walk's result, the claims released, and warnings.
    """
    store, record = hold.store, hold.record
    plan, redactor, notes, loaded = await plan_for(build, record, env)
    if not compensate and loaded is not None:  # the operator's choice; gates are still told
        plan, notes = None, ["compensations skipped: cancelling without them"]
    gates = gate_hooks(loaded, actor) if loaded is not None else None
    result = await walk(
        store, record.id, lease=hold.claim, plan=plan, intended=intended, actor=actor,
        clock=hold.clock, redactor=redactor, reason=reason, first=first, notes=tuple(notes),
        notify=warn, gates=gates,
    )  # fmt: skip
    return result, *await settle_claims(hold, result.claims, held=result.held)


async def settle_claims(
    hold: Hold, claims: Mapping[str, str], *, held: frozenset[str] = frozenset()
) -> tuple[list[str], list[str]]:
    """Give back the gone holder's claims that lapsed; leave the live ones to lapse at their
    TTL (:func:`~zuke.runs.lifecycle.live_claims`). The keys given back, and warnings.

    A run-held lock (``held``) is the run's, not a body's: whoever holds the run's lease
    gives it back, live or not (a suspended run keeps it for as long as its gates wait)."""
    live = await live_claims(hold.store, hold.run_id, claims, now_ms=hold.clock.now_ms())
    live = {k: v for k, v in live.items() if k not in held}
    released: list[str] = []
    warnings: list[str] = []
    for key, token in sorted(claims.items()):
        if key in live:
            warnings.append(
                f"left {key} to lapse at its TTL ({iso(live[key])}): its holder may still "
                f"run; free it sooner with: zuke locks break {key}"
            )
            continue
        try:
            await asyncio.to_thread(hold.store.release_lock, key, token)
            released.append(key)
        except Exception as exc:
            warnings.append(f"could not release {key} ({exc}); it lapses after its TTL")
    return released, warnings
