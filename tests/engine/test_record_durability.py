"""No silent loss of the run record, through the real CLI (in process).

Faults are injected at the store's seams: a store that raises ``OSError`` on
its Nth write, and the filesystem store's own file primitives failing with
``ENOSPC`` (a full disk) or ``EROFS`` (a read-only directory — ``chmod``
would not stop root, which CI runs as). Each run must either land its record
or exit non-zero with one ``zuke: could not record run …`` line, never print
"Build succeeded" for a record that did not land, and never leave a record
that says ``succeeded`` with targets still pending.
"""

from __future__ import annotations

import asyncio
import errno
import os
import types
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CliResult, CliRunner
from tests.engine.record_support import record_failure_line, record_failure_lines, the_record
from zuke import Build, StateStore, target
from zuke._engine import writer as writer_module
from zuke._engine.run import RunOptions, execute_async
from zuke.state import _files
from zuke.state._protocol import Conflict, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the writer's backoff (its count, not its wall time)."""
    monkeypatch.setattr(writer_module, "BACKOFF_S", (0.0, 0.0, 0.0))


class FailingFromNth(MemoryStateStore):
    """Raises ``OSError`` on its Nth run write (create, put, append) and, if ``stay``, after."""

    def __init__(self, nth: int, *, stay: bool) -> None:
        super().__init__()
        self.nth, self.stay, self.count = nth, stay, 0

    def _write(self) -> None:
        self.count += 1
        if self.count == self.nth or (self.stay and self.count > self.nth):
            raise OSError(errno.EIO, "Input/output error")

    def create_run(self, record: RunRecord) -> Written | Conflict:
        self._write()
        return super().create_run(record)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        self._write()
        return super().put_run(record, expected_version=expected_version)

    def append_run(self, run_id: str, delta: RunDelta, *, expected_version: str) -> Any:
        self._write()
        return super().append_run(run_id, delta, expected_version=expected_version)


def chain_build(store: StateStore | None = None, arm: Any = None) -> type[Build]:
    """a → b → c; ``arm()`` runs in b's body (to break the store mid-run)."""

    class Chain(Build):
        def state_store(self) -> StateStore | None:
            return store

        @target
        def a(self, t: Any) -> Any:
            return t.executes(lambda: None)

        @target
        def b(self, t: Any) -> Any:
            return t.depends_on(self.a).executes(arm or (lambda: None))

        @target
        def c(self, t: Any) -> Any:
            return t.depends_on(self.b).executes(lambda: None)

    return Chain


def assert_honest(record: RunRecord) -> None:
    """A record never claims success it cannot show."""
    if record.status == "succeeded":
        unsettled = [n for n, t in record.targets.items() if t.status != "succeeded"]
        assert unsettled == [], f"succeeded with {unsettled} not succeeded"


def assert_reported(result: CliResult) -> str:
    line = record_failure_line(result)
    assert "Run not recorded — 3/3 targets succeeded" in result.out
    return line


def test_one_failed_write_is_retried_and_the_writer_is_never_dropped(cli: CliRunner) -> None:
    store = FailingFromNth(3, stay=False)  # create, a running, then the failing one
    result = cli("c", build=chain_build(store))
    assert result.code == 0, result.text
    assert "dropped" not in result.err
    record = the_record(store)
    assert record.status == "succeeded"
    assert {n: t.status for n, t in record.targets.items()} == dict.fromkeys("abc", "succeeded")


def test_a_store_failing_every_write_from_the_nth_on_exits_1_and_says_so(cli: CliRunner) -> None:
    store = FailingFromNth(3, stay=True)
    result = cli("c", build=chain_build(store))
    line = assert_reported(result)
    assert line.startswith("zuke: could not record run ")
    assert "OSError: [Errno 5] Input/output error" in line
    assert "the record is left running and could not be marked degraded" in line
    assert "zuke runs show" in line
    record = the_record(store)
    assert record.status == "running"
    assert_honest(record)


class FaultyOs(types.ModuleType):
    """``os`` for the filesystem store's file primitives, failing once ``armed``."""

    def __init__(self, fault: int) -> None:
        super().__init__("os")
        self.fault = fault
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: Any) -> int:
        # A filesystem that turned read-only refuses write(2) on descriptors already open
        # too (EROFS, man 2 write): the store keeps its journal and mutex files open.
        if self.armed and self.fault in (errno.ENOSPC, errno.EROFS):
            raise OSError(self.fault, os.strerror(self.fault))
        return os.write(fd, data)

    def open(self, path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        writes = flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND)
        if self.armed and self.fault == errno.EROFS and writes:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return os.open(path, flags, *args, **kwargs)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [(errno.ENOSPC, "No space left on device"), (errno.EROFS, "Read-only file system")],
    ids=["full-disk", "read-only-directory"],
)
def test_a_filesystem_store_that_stops_taking_writes_mid_run_exits_1(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: int, reason: str
) -> None:
    faulty = FaultyOs(fault)
    monkeypatch.setattr(_files, "os", faulty)
    store = FileSystemStateStore(tmp_path / "runs")

    def break_the_disk() -> None:
        faulty.armed = True

    result = cli("c", build=chain_build(store, arm=break_the_disk))
    line = assert_reported(result)
    assert reason in line
    assert str(tmp_path / "runs") in line
    assert "could not be marked degraded" in line
    faulty.armed = False
    record = the_record(store)
    assert record.status == "running"  # what a sweep must not take for a success
    assert record.targets["b"].status == "running"
    assert_honest(record)


def test_without_a_store_nothing_is_said_about_a_record(cli: CliRunner) -> None:
    result = cli("c", build=chain_build(None))
    assert result.code == 0, result.text
    assert record_failure_lines(result) == []
    assert "Build succeeded" in result.out


def test_a_triggers_persist_raises_when_the_gate_state_did_not_land_so_no_call_follows() -> None:
    """``await ctx.persist()`` before an external call: if the write is only kept for later,
    the trigger must not go on to make the call (it would not be recorded as made)."""
    from zuke import NotYet, WaitContext, WaitTrigger

    calls: list[str] = []

    class Dispatching(WaitTrigger):
        @property
        def descriptor(self) -> str:
            return "dispatch"

        async def check(self, ctx: WaitContext) -> Any:
            ctx.state.set({"marker": "m-1"})
            await ctx.persist()
            calls.append("dispatched")
            return NotYet()

    store = FailingFromNth(2, stay=True)  # the run's creation lands, nothing after it

    class Gated(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def gate(self, t: Any) -> Any:
            return t.waits_for(lambda s: s.on(Dispatching()))

    warnings: list[str] = []
    result = asyncio.run(
        execute_async(Gated, RunOptions(targets=["gate"], env={}, on_warning=warnings.append))
    )
    assert calls == []
    assert any("could not be made durable" in w for w in warnings)
    assert not result.ok
