"""A fan-out build for tests, assembled from per-test pieces, run in-process on a memory store."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from zuke import Build, parameter, target
from zuke._engine.result import RunResult
from zuke._engine.run import RunOptions, execute_async
from zuke._fan_out import ForEachSettings
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord

Stages = Callable[[Any, int], Mapping[str, TargetBuilder]]


def fan_build(
    store: MemoryStateStore,
    stages: Stages,
    *,
    items: Callable[[Build], Any] | None = None,
    configure: Callable[[ForEachSettings], Any] | None = None,
    batch: Callable[[TargetBuilder], TargetBuilder] = lambda t: t,
    extra: Mapping[str, Any] | None = None,
    after: Callable[[], None] = lambda: None,
) -> type[Build]:
    """``batch`` (the fan-out over ``--repos``, default ``a,b,c``) and ``ship`` after it."""

    def batch_target(self: Build, t: TargetBuilder) -> TargetBuilder:
        read = items or (lambda build: build.repos.value)  # type: ignore[attr-defined]
        return batch(t).for_each(lambda: read(self), stages, configure)

    def ship(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.batch).executes(after)  # type: ignore[attr-defined]

    namespace: dict[str, Any] = {
        "repos": parameter("services").array(),
        "state_store": lambda self: store,
        "batch": target(batch_target),
        "ship": target(ship),
    }
    namespace.update(extra or {})
    return type("Fan", (Build,), namespace)


def run(
    build: type[Build],
    *targets: str,
    repos: Sequence[str] = ("a,b,c",),
    cancel: asyncio.Event | None = None,
    warnings: list[str] | None = None,
    env: dict[str, str] | None = None,
    **options: Any,
) -> RunResult:
    opts = RunOptions(
        targets=list(targets or ["ship"]),
        params={"repos": list(repos)},
        env=env or {},
        cancel=cancel,
        on_warning=(warnings if warnings is not None else []).append,
        **options,
    )
    return asyncio.run(execute_async(build, opts))


def only(store: MemoryStateStore) -> RunRecord:
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    return found.record


def statuses(result: RunResult) -> dict[str, str]:
    return {name: o.status for name, o in result.outcomes.items()}
