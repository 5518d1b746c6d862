"""Builds and helpers for the gate, resume, sweep and reap tests (in-process, injected clock)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from zuke import Build, external_signal, parameter, target
from zuke._clock import ManualClock
from zuke._engine.result import RunResult
from zuke._engine.run import RunOptions, execute_async
from zuke._target import TargetBuilder
from zuke._waits import WaitSettings, WaitTrigger
from zuke.runs.resume import ResumeOptions, ResumeOutcome, SignalDelivery, resume_run_async
from zuke.runs.sweep import resume_check_async
from zuke.runs.sweep_report import SweepReport
from zuke.state._protocol import StateStore
from zuke.state.records import RunRecord

HOUR = 3_600_000


def approval(
    trigger: WaitTrigger | None = None,
    *,
    timeout: str | None = "72h",
    on_timeout: str | None = None,
) -> Callable[[Build, WaitSettings], Any]:
    """A gate's settings; ``on_timeout="rollback"`` names the build's rollback target."""

    def configure(build: Build, s: WaitSettings) -> Any:
        s = s.on(trigger or external_signal("approved"))
        if timeout is not None:
            s = s.timeout(timeout)
        if on_timeout == "rollback":
            s = s.on_timeout(build.rollback)  # type: ignore[attr-defined]
        elif on_timeout is not None:
            s = s.on_timeout(on_timeout)  # type: ignore[arg-type]
        return s

    return configure


def release_build(
    store: StateStore | None,
    calls: list[Any],
    *,
    gate: Callable[[Build, WaitSettings], Any] | None = None,
    deadline: str | None = None,
    name: str = "Release",
    extra: Mapping[str, Any] | None = None,
) -> type[Build]:
    """``deploy → approve (gate) → promote → release``, with ``lint`` an independent branch
    of ``release`` and ``rollback`` outside the graph. Bodies log to ``calls``."""
    configure = gate or approval()

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            calls.append("deploy")
            ctx.state.set({"at": f"sit-{self.repo.value}"})  # type: ignore[attr-defined]

        return t.executes(body)

    def lint(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: calls.append("lint"))

    def approve(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.deploy).waits_for(  # type: ignore[attr-defined]
            lambda s: configure(self, s)
        )

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            calls.append(("promote", ctx.signals.get("approved"), self.repo.value))  # type: ignore[attr-defined]

        return t.depends_on(self.approve).executes(body)  # type: ignore[attr-defined]

    def release(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.promote, self.lint)  # type: ignore[attr-defined]

    def rollback(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: calls.append(("rollback", ctx.state_of("deploy").get())))

    namespace: dict[str, Any] = {
        "repo": parameter("service").default("api"),
        "token": parameter("a secret").secret(),
        "state_store": lambda self: store,
        "deadline": lambda self: deadline,
    }
    for fn in (deploy, lint, approve, promote, release, rollback):
        namespace[fn.__name__] = target(fn)
    namespace.update(extra or {})
    return type(name, (Build,), namespace)


@dataclass
class Harness:
    """One build against one store and one manual clock."""

    build: type[Build]
    store: StateStore
    clock: ManualClock
    env: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)

    def options(self, **changes: Any) -> RunOptions:
        values: dict[str, Any] = {
            "env": self.env,
            "clock": self.clock,
            "on_warning": self.warnings.append,
        }
        values.update(changes)
        return RunOptions(**values)

    def start(self, *targets: str, params: Mapping[str, Sequence[str]] | None = None) -> RunResult:
        options = self.options(targets=list(targets or ["release"]), params=params or {})
        return asyncio.run(execute_async(self.build, options))

    def resume(
        self,
        run_id: str,
        signal: str | None = None,
        data: Any = None,
        *,
        signal_id: str | None = None,
        build: type[Build] | None = None,
        **changes: Any,
    ) -> ResumeOutcome:
        delivery = None if signal is None else SignalDelivery(signal, data, signal_id)
        resume = ResumeOptions(signal=delivery, **changes)
        run = self.options(params=resume.params)
        return asyncio.run(resume_run_async(build or self.build, self.store, run_id, resume, run))

    def sweep(
        self, run_id: str | None = None, *, build: type[Build] | None = None, **changes: Any
    ) -> SweepReport:
        resume = ResumeOptions(**changes)
        return asyncio.run(
            resume_check_async(
                build or self.build, self.store, run_id=run_id, resume=resume, run=self.options()
            )
        )

    def record(self, run_id: str) -> RunRecord:
        found = self.store.get_run(run_id)
        assert found is not None, f"no run {run_id}"
        return found.record

    def statuses(self, run_id: str) -> dict[str, str]:
        return {name: row.status for name, row in self.record(run_id).targets.items()}


class RecordingStore:
    """A store that logs the calls that matter for lease order, then delegates."""

    def __init__(self, inner: StateStore) -> None:
        self.inner = inner
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def acquire_lock(self, key: str, *args: Any, **kwargs: Any) -> Any:
        taken = self.inner.acquire_lock(key, *args, **kwargs)
        self.calls.append(("acquire", f"{key}:{type(taken).__name__}"))
        return taken

    def release_lock(self, key: str, token: str) -> Any:
        self.calls.append(("release", key))
        return self.inner.release_lock(key, token)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Any:
        self.calls.append(("write", record.status))
        return self.inner.put_run(record, expected_version=expected_version)

    def append_run(self, run_id: str, delta: Any, *, expected_version: str) -> Any:
        self.calls.append(("write", delta.status or "-"))
        return self.inner.append_run(run_id, delta, expected_version=expected_version)  # type: ignore[attr-defined]

    def statuses_written(self) -> list[str]:
        return [what for kind, what in self.calls if kind == "write" and what != "-"]


class FakeWaiter:
    """The watcher's waiter on a manual clock: each wait moves the clock by its timeout,
    unless poked; ``on_wait(n)`` runs first — the test's turn between sweep n and n+1."""

    def __init__(self, clock: ManualClock, on_wait: Callable[[int], None] = lambda n: None) -> None:
        self.clock = clock
        self.waits: list[int] = []
        self.poked = False
        self.on_wait = on_wait

    def wait(self, timeout_ms: int) -> None:
        self.waits.append(timeout_ms)
        self.on_wait(len(self.waits))
        if self.poked:
            self.poked = False
            return
        self.clock.advance(timeout_ms)

    def poke(self) -> None:
        self.poked = True
