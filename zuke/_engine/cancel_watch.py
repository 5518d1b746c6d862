"""Noticing a cancel requested from another process (``zuke cancel``).

A canceller never frees a live owner's claims; it marks the record
``cancelling`` and leaves the stopping to the owner (see
:mod:`zuke.runs.cancel`). So the owner must notice. It does in two ways:

* this watch reads the record every ``ZUKE_CANCEL_POLL`` (2 s by default):
  one cheap read, and a cancel takes effect within that time even while no
  target transitions;
* the state writer sees the mark whenever a write conflicts with it.

Either way the owner cancels its scheduler as Ctrl-C would — bodies are told
to stop and waited for, locks are released — and records the run
``cancelled`` (exit 130). A record another process already *settled*
(a TypeScript client, or a takeover after this process's lease lapsed) stops
the run without writing over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Mapping

from zuke._duration import parse_duration
from zuke.state._protocol import StateStore
from zuke.state.records import TERMINAL_STATUSES, RunRecord, RunStatus

CANCEL_POLL_MS = 2_000


def poll_interval_s(env: Mapping[str, str]) -> float:
    raw = env.get("ZUKE_CANCEL_POLL", "")
    return (parse_duration(raw, what="ZUKE_CANCEL_POLL") if raw else CANCEL_POLL_MS) / 1000


def requested_by(record: RunRecord) -> str:
    """Who asked for the cancel: the actor of the newest ``cancel`` event."""
    for event in reversed(record.events):
        if event.tool == "cancel":
            return event.actor
    return "another process"


class CancelWatch:
    """Polls one run's record for ``cancelling`` (or a settlement by someone else).

    It polls on a thread of its own, not on the event loop: a synchronous body
    may run on the loop's thread (see ``docs/architecture.md``), and a cancel
    must reach it meanwhile. What it finds is acted on on the loop; ``tell``
    (the scheduler's :meth:`~zuke._engine.scheduler.Scheduler.interrupt_from_thread`)
    reaches such a body at once.
    """

    def __init__(
        self,
        store: StateStore,
        run_id: str,
        *,
        interval_s: float,
        on_request: Callable[[str], None],
        on_settled: Callable[[RunStatus], None],
        warn: Callable[[str], None],
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.interval_s = interval_s
        self.on_request = on_request
        self.on_settled = on_settled
        self.warn = warn
        #: called on the watch's thread once the loop has been given what it found
        self.tell: Callable[[], None] = lambda: None
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> CancelWatch:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(
            target=self._watch, name=f"zuke-cancel-watch-{self.run_id}", daemon=True
        )
        self._thread.start()
        return self

    @staticmethod
    def _acts_on(record: RunRecord) -> bool:
        return record.status == "cancelling" or record.status in TERMINAL_STATUSES

    def seen(self, record: RunRecord) -> bool:
        """Act on what ``record`` says; True once there is nothing more to watch for."""
        if record.status == "cancelling":
            self.on_request(requested_by(record))
            return True
        if record.status in TERMINAL_STATUSES:
            self.on_settled(record.status)
            return True
        return False

    def _watch(self) -> None:
        """The watch's thread: one read every ``interval_s`` until it finds something."""
        failing = False
        while not self._stopped.wait(self.interval_s):
            try:
                found = self.store.get_run(self.run_id)
            except Exception as exc:  # an outage: say so once, keep watching
                if not failing:
                    self._to_loop(
                        self.warn, f"state: checking run {self.run_id} for a cancel failed ({exc})"
                    )
                failing = True
                continue
            failing = False
            if found is not None and self._acts_on(found.record):
                self._to_loop(self._found, found.record)
                if not self._stopped.is_set():
                    self.tell()
                return

    def _found(self, record: RunRecord) -> None:
        if not self._stopped.is_set():  # stopped meanwhile: the run has ended
            self.seen(record)

    def _to_loop(self, fn: Callable[..., object], *args: object) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run is over
            self._loop.call_soon_threadsafe(fn, *args)

    async def stop(self) -> None:
        """Stop watching; a read in flight is ignored (the thread is not waited for)."""
        self._stopped.set()
        self._thread = None
