"""A transition's write sent and answered later (issue 28 §2): the next body still waits.

The store here sends an append now and answers it when asked (as the Postgres store's
``send_append_known`` does); its answer can be held on an event, fail or conflict. Every
case checks the guarantee of docs/state.md: a body starts only once the write of its
``running`` transition (carrying its predecessor's settlement) was answered and settled.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

from tests.engine.test_takeover import take_over
from zuke import Build, target
from zuke._clock import ManualClock
from zuke._engine import writer as writer_module
from zuke._engine.observer import Observer, Transition
from zuke._engine.run import RunOptions, execute_async
from zuke._engine.store_traits import sends_appends
from zuke.state._protocol import Conflict, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta, RunRecord

#: how long a test waits for something another thread does before it fails
DEADLINE_S = 10.0


def running(delta: RunDelta) -> str:
    return ",".join(sorted(n for n, row in delta.targets.items() if row.status == "running"))


class SendingStore(MemoryStateStore):
    """A memory store that sends an append now and answers it when asked."""

    inline_writes = True
    append_after_lazily = True

    def __init__(self, log: list[tuple[str, str]]) -> None:
        super().__init__()
        self.log = log
        self.release = threading.Event()
        self.release.set()
        self.waiting = threading.Event()  # an answer is being waited for
        self.raises: list[BaseException] = []  # raised by the next answers, one each
        self.before_answer: Callable[[str], None] = lambda names: None

    def append_run_known(
        self, run_id: str, delta: RunDelta, *, expected_version: str, after: Any
    ) -> Written | Conflict:
        self.log.append(("append", running(delta)))
        return self.append_run(run_id, delta, expected_version=expected_version)

    def send_append_known(
        self, run_id: str, delta: RunDelta, *, expected_version: str, after: Any
    ) -> Callable[[], Written | Conflict]:
        names = running(delta)
        self.log.append(("sent", names))

        def answer() -> Written | Conflict:
            self.waiting.set()
            assert self.release.wait(DEADLINE_S), "the answer was never released"
            self.before_answer(names)
            if self.raises:
                self.log.append(("failed", names))
                raise self.raises.pop(0)
            outcome = self.append_run(run_id, delta, expected_version=expected_version)
            self.log.append(("answered", names))
            return outcome

        return answer


class Logging(Observer):
    def __init__(self, log: list[tuple[str, str]], name: str, *, before: bool) -> None:
        self.log, self.name, self.before_recorded = log, name, before

    async def transition(self, t: Transition) -> None:
        if t.status == "running":
            self.log.append((self.name, t.target))


def chain(store: SendingStore, log: list[tuple[str, str]], b_body: Any = None) -> type[Build]:
    class Chain(Build):
        def state_store(self) -> MemoryStateStore:
            return store

        @target
        def a(self, t: Any) -> Any:
            return t.executes(lambda: log.append(("body", "a")))

        @target
        def b(self, t: Any) -> Any:
            return t.depends_on(self.a).executes(b_body or (lambda: log.append(("body", "b"))))

    return Chain


def run(build: type[Build], log: list[tuple[str, str]], clock: ManualClock | None = None) -> Any:
    options = RunOptions(
        targets=["b"], env={}, state=True, inline=True, clock=clock or ManualClock(),
        observers=[Logging(log, "console", before=True), Logging(log, "reporter", before=False)],
        on_warning=lambda line: log.append(("warning", line)),
    )  # fmt: skip
    return asyncio.run(execute_async(build, options))


def at(log: list[tuple[str, str]], entry: tuple[str, str]) -> int:
    assert entry in log, f"{entry} never happened: {log}"
    return log.index(entry)


def test_the_store_here_is_taken_for_one_that_sends() -> None:
    assert sends_appends(SendingStore([]))
    assert not sends_appends(MemoryStateStore())


def test_the_next_body_waits_until_the_held_answer_is_released() -> None:
    log: list[tuple[str, str]] = []
    store = SendingStore(log)
    store.release.clear()

    def releaser() -> None:
        # b's write is out and its answer awaited: b's body must not have started
        assert store.waiting.wait(DEADLINE_S)
        log.append(("released", ",".join(n for k, n in log if k == "sent")))
        store.release.set()

    thread = threading.Thread(target=releaser)
    thread.start()
    try:
        result = run(chain(store, log), log)
    finally:
        store.release.set()
        thread.join()
    assert result.status == "succeeded", log
    released = next(i for i, (kind, _) in enumerate(log) if kind == "released")
    assert released < at(log, ("answered", "a")) < at(log, ("body", "a"))
    # b's write (a settled, b running): sent, the console's line meanwhile, then answered —
    # and only then the reporter and b's body
    sent = at(log, ("sent", "b"))
    assert sent < at(log, ("console", "b")) < at(log, ("answered", "b"))
    assert at(log, ("answered", "b")) < at(log, ("reporter", "b")) < at(log, ("body", "b"))
    found = store.get_run(result.run_id)
    assert found is not None
    assert {n: t.status for n, t in found.record.targets.items()} == {
        "a": "succeeded",
        "b": "succeeded",
    }


def test_a_failed_answer_is_retried_before_the_next_body(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "BACKOFF_S", (0.0, 0.0))
    log: list[tuple[str, str]] = []
    store = SendingStore(log)
    store.before_answer = lambda names: (
        store.raises.append(OSError("connection reset")) if names == "b" else None
    )
    result = run(chain(store, log), log)
    assert result.status == "succeeded", log
    # the answer failed; the write went again (the ordinary way) before b's body started
    assert at(log, ("failed", "b")) < at(log, ("append", "b")) < at(log, ("body", "b"))
    assert at(log, ("append", "b")) < at(log, ("reporter", "b"))
    found = store.get_run(result.run_id)
    assert found is not None and found.record.targets["b"].status == "succeeded"


def test_an_answer_that_finds_the_run_taken_over_stops_the_next_body() -> None:
    log: list[tuple[str, str]] = []
    clock = ManualClock()
    store = SendingStore(log)
    taken: list[str] = []

    def another_process_takes_it(names: str) -> None:
        if names == "b" and not taken:  # while b's write is out
            run_id = next(iter(store._runs))
            taken.append(take_over(store, run_id, clock))

    store.before_answer = another_process_takes_it
    result = run(chain(store, log), log, clock)
    assert taken, "the takeover never happened"
    assert ("body", "b") not in log  # the run is another's now: b's body never ran here
    assert ("reporter", "b") not in log or at(log, ("reporter", "b")) > at(log, ("sent", "b"))
    assert result.status != "succeeded"
    found = store.get_run(result.run_id)
    assert found is not None
    record: RunRecord = found.record
    assert record.targets["b"].status != "succeeded"


def test_a_ctrl_c_while_the_write_is_out_stops_the_next_body_and_the_end_waits_for_it() -> None:
    log: list[tuple[str, str]] = []
    store = SendingStore(log)
    cancel: list[asyncio.Event] = []

    def interrupted(names: str) -> None:
        if names == "b":  # as Ctrl-C does: the run's cancel event, set on the loop
            cancel[0].set()
            log.append(("ctrl-c", names))

    store.before_answer = interrupted

    async def go() -> Any:
        cancel.append(asyncio.Event())
        options = RunOptions(
            targets=["b"], env={}, state=True, inline=True, clock=ManualClock(),
            cancel=cancel[0], on_warning=lambda line: log.append(("warning", line)),
        )  # fmt: skip
        return await execute_async(chain(store, log), options)

    result = asyncio.run(go())
    assert at(log, ("sent", "b")) < at(log, ("ctrl-c", "b")) < at(log, ("answered", "b"))
    assert ("body", "b") not in log
    assert result.status == "cancelled", log
    found = store.get_run(result.run_id)
    assert found is not None
    assert found.record.status == "cancelled"  # the end was written after b's answer
    assert found.record.targets["a"].status == "succeeded"
    assert found.record.targets["b"].status != "succeeded"
