"""The seam ``github_approval`` stands on: a trigger sees the run's recorded actor
(``WaitContext.actor``) in the process that started the run and in a later sweep elsewhere,
so ``no_self_approval()`` judges by who started the run, not by who sweeps."""

from __future__ import annotations

from typing import Any

from tests.runs.support import Harness, approval, release_build
from zuke import NotYet, WaitContext, WaitTrigger
from zuke._clock import ManualClock
from zuke.state.memory import MemoryStateStore


class _Actors(WaitTrigger):
    def __init__(self, seen: list[str | None]) -> None:
        self.seen = seen

    @property
    def descriptor(self) -> str:
        return "actors"

    def check(self, ctx: WaitContext) -> Any:
        self.seen.append(ctx.actor)
        return NotYet("waiting")


def test_a_trigger_sees_the_runs_recorded_actor_when_started_and_when_swept() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    seen: list[str | None] = []
    build = release_build(store, [], gate=approval(_Actors(seen)))
    starter = Harness(build, store, clock, env={"ZUKE_ACTOR": "alice"})
    run = starter.start()
    assert run.status == "suspended"
    sweeper = Harness(build, store, clock, env={"ZUKE_ACTOR": "release-bot"})
    sweeper.sweep()
    assert seen == ["alice", "alice"]
