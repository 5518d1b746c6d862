"""A store that asks to be written at durability points only (each write is a commit)."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.engine.builds import chain_build
from zuke import Build, external_signal, target
from zuke._engine.run import RunOptions, execute_async
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore


class CountingStore(MemoryStateStore):
    """A memory store that counts the record writes, and says it is checkpointed."""

    checkpointed = True

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def create_run(self, record: Any) -> Any:
        self.writes += 1
        return super().create_run(record)

    def put_run(self, record: Any, *, expected_version: str) -> Any:
        self.writes += 1
        return super().put_run(record, expected_version=expected_version)

    def append_run(self, run_id: str, delta: Any, *, expected_version: str) -> Any:
        self.writes += 1
        return super().append_run(run_id, delta, expected_version=expected_version)


def run(build: type[Build], *targets: str) -> Any:
    options = RunOptions(targets=list(targets), env={}, state=True)
    return asyncio.run(execute_async(build, options))


def test_a_ten_target_run_is_written_when_created_and_when_it_ends_and_ends_complete() -> None:
    store = CountingStore()
    build = chain_build(10, state_store=lambda self: store)
    result = run(build, "t9")
    assert result.status == "succeeded"
    assert store.writes == 2  # created, then its end with every row
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    assert {row.status for row in found.record.targets.values()} == {"succeeded"}
    assert found.record.status == "succeeded"


def test_a_run_that_suspends_is_written_at_its_suspension_with_every_row() -> None:
    store = CountingStore()

    class Gated(Build):
        def state_store(self) -> CountingStore:
            return store

        @target
        def deploy(self, t: TargetBuilder) -> TargetBuilder:
            return t.executes(lambda ctx: ctx.state.set({"at": "sit"}))

        @target
        def approve(self, t: TargetBuilder) -> TargetBuilder:
            return t.depends_on(self.deploy).waits_for(lambda s: s.on(external_signal("ok")))

    result = run(Gated, "approve")
    assert result.status == "suspended"
    assert store.writes == 2
    found = store.get_run(result.run_id)
    assert found is not None
    assert found.record.targets["deploy"].meta == {"at": "sit"}
    assert found.record.targets["approve"].status == "waiting"


def test_an_ordinary_store_still_records_running_before_each_body() -> None:
    store = CountingStore()
    store.checkpointed = False
    run(chain_build(10, state_store=lambda self: store), "t9")
    assert store.writes >= 10
