"""``zuke resume --check --watch``: sweep, wait, sweep again — forever, on any store.

A sweep (:func:`zuke.runs.sweep.resume_check_async`) runs at once and then
every ``every_ms``. The interval is the backstop: a store that can say when a
write matters to a sweep (duck-typed, a ``listen(wake)`` method — the Postgres
store's LISTEN/NOTIFY) wakes the watcher sooner, and a burst of such wakes
within ``settle_ms`` (10 ms) is one sweep, as are the wakes that come while a
sweep runs (one more sweep after it, no sooner than that sweep took). A
wake that names its run (a NOTIFY's payload does) lets that sweep look at the
named runs only (``sweep_runs``, when the caller gives one): a signal to one
run does not cost a listing of every run; the start, the interval, a retry and
a wake that names nothing (an outsized payload, a reconnection) sweep every
run, as before. Wakes
are lost while nobody listens, so after its listen connection comes back the
store says so and the watcher sweeps once. The first sweep waits (up to
``listen_wait_ms``) for the first listen to be in place, so that it sees every
write a wake would have reported and the watcher sweeps once at start, not
twice.

A sweep that fails as a whole (the store is unreachable) is reported and the
next one is tried after a backoff that doubles from ``backoff_ms`` up to the
interval; the watcher never exits for it. Nor for a build that cannot be used
(a bad merge): that sweep raises :class:`NotChecked` with the runs it left
alone, reported as such, and the next sweep comes at the interval as usual.

:meth:`Watcher.stop` (SIGTERM, Ctrl-C) lets the run in hand finish — the
sweep looks at the stop between runs, never inside one's transition — and then
:meth:`Watcher.run` returns.

Time and waiting are injected (a :class:`~zuke._clock.Clock` and a
:class:`Waiter`), so tests drive the loop without sleeping.
"""

from __future__ import annotations

import contextlib
import os
import select
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import ZukeError

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine

    from zuke._build import Build
    from zuke._engine.run import RunOptions
    from zuke.runs.continuation import ResumeOptions
    from zuke.runs.sweep_report import SweepReport
    from zuke.state._protocol import StateStore

T = TypeVar("T")

DEFAULT_EVERY_MS = 5 * 60_000
#: the first wait after a failed sweep; it doubles, up to the interval
BACKOFF_MS = 5_000
#: how long a wake waits for more wakes before its sweep (a burst is one sweep): DBOS
#: coalesces its notifications over 10 ms too
SETTLE_MS = 10
#: the least time between the starts of two sweeps a wake asked for; besides, a sweep a wake
#: asked for starts no sooner after the last one ended than that one took (a flood of wakes
#: keeps the watcher sweeping half its time at most)
MIN_GAP_MS = 0
#: how long the first sweep waits for the store's first listen to be in place
LISTEN_WAIT_MS = 5_000


@dataclass(frozen=True)
class WatchSettings:
    every_ms: int = DEFAULT_EVERY_MS
    backoff_ms: int = BACKOFF_MS
    settle_ms: int = SETTLE_MS
    min_gap_ms: int = MIN_GAP_MS
    listen_wait_ms: int = LISTEN_WAIT_MS


class Waiter(Protocol):
    """Blocks the watcher until ``poke()`` or a timeout (a real one, or a test's)."""

    def wait(self, timeout_ms: int) -> None: ...

    def poke(self) -> None: ...


class PipeWaiter:
    """The real waiter: ``select`` on a pipe that :meth:`poke` writes a byte to. Safe from a
    signal handler (a lock-based ``threading.Event`` could deadlock there) and other threads."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        os.set_blocking(self._read, False)
        os.set_blocking(self._write, False)

    def wait(self, timeout_ms: int) -> None:
        select.select([self._read], [], [], max(timeout_ms, 0) / 1000)
        with contextlib.suppress(BlockingIOError):
            os.read(self._read, 4096)  # the watcher checks its flags after this: no poke lost

    def poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):  # full: it is poked already
            os.write(self._write, b"!")

    def close(self) -> None:
        for fd in (self._read, self._write):
            with contextlib.suppress(OSError):
                os.close(fd)


class SweepLoop:
    """The watcher's one event loop, kept from sweep to sweep (an ``asyncio.Runner``).

    A wake's sweep should not pay for a fresh loop: ``asyncio.run`` per sweep made
    one, started the default executor's worker thread again for the sweep's first
    store call, and joined it at the end. Kept, the loop and its executor's threads
    serve every sweep; :meth:`close` (the watcher's end) shuts them down as
    ``asyncio.run`` would have. A sweep leaves no task behind (the engine awaits what
    it starts), so nothing of one sweep runs into the next."""

    def __init__(self) -> None:
        self._runner: asyncio.Runner | None = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._runner is None:
            import asyncio

            self._runner = asyncio.Runner()
        return self._runner.run(coro)

    def close(self) -> None:
        if self._runner is not None:
            self._runner.close()
            self._runner = None


class NotChecked(ZukeError):
    """A sweep that could not use the build: nothing moved; ``report`` lists the runs it
    would have looked at, each not checked, and ``reason`` says why."""

    def __init__(self, reason: str, report: SweepReport) -> None:
        super().__init__(reason)
        self.reason, self.report = reason, report


class WatchObserver:
    """What the watcher tells its caller (the CLI renders it); every method a no-op here."""

    def sweeping(self, why: str) -> None:
        """A sweep starts; ``why``: start, interval, wake, reconnected or retry."""

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        """A sweep ended; the next is due at ``next_ms`` unless a wake comes first."""

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        """A sweep failed as a whole; the next try is at ``next_ms``."""

    def unchecked(self, report: SweepReport, reason: str, at_ms: int, next_ms: int) -> None:
        """A sweep could not use the build (``reason``): its runs are not checked."""

    def idle(self, next_ms: int) -> None:
        """The watcher waits for the next sweep (due at ``next_ms``)."""

    def note(self, message: str) -> None:
        """Something worth a line: the listen connection dropped or came back."""


#: a store's ``listen(wake)``: the returned handle is closed when the watcher stops
Listen = Callable[[Callable[[str, str | None], None]], Any]
#: a sweep: ``stop`` is asked between runs; a whole failure raises ZukeError
SweepFn = Callable[[Callable[[], bool]], "SweepReport"]
#: a sweep of the named runs only (what a wake that named them asks), as a ``SweepFn``
RunsSweepFn = Callable[[Callable[[], bool], frozenset[str]], "SweepReport"]


class Watcher:
    """The loop; :meth:`stop` may be called from a signal handler or another thread."""

    def __init__(
        self,
        sweep: SweepFn,
        *,
        settings: WatchSettings | None = None,
        clock: Clock = SYSTEM_CLOCK,
        waiter: Waiter | None = None,
        observer: WatchObserver | None = None,
        listen: Listen | None = None,
        sweep_runs: RunsSweepFn | None = None,
    ) -> None:
        self._sweep = sweep
        self._sweep_runs = sweep_runs
        self.settings = settings or WatchSettings()
        self._clock = clock
        self._owned: PipeWaiter | None = None
        if waiter is None:
            waiter = self._owned = PipeWaiter()
        self._waiter = waiter
        self._observer = observer or WatchObserver()
        self._listen = listen
        self._listening: Any = None
        self._lock = threading.Lock()
        self._woken_at: int | None = None  # the first wake not yet swept
        self._why = "wake"
        #: the runs the wakes not yet swept named; ``None``: one named none (sweep them all)
        self._named: set[str] | None = set()
        self._stopping = False
        self._notes: list[str] = []
        self._listen_answered = False  # the store said how its first listen went
        self.sweeps = 0

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def wake_pending(self) -> bool:
        """Whether a wake has come that no sweep has begun to cover yet."""
        with self._lock:
            return self._woken_at is not None

    def _halted(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Finish the run in hand, then return from :meth:`run` (safe in a signal handler)."""
        self._stopping = True
        self._waiter.poke()

    def wake(self, kind: str, detail: str | None = None) -> None:
        """A store's wake: ``"notify"`` (a write that matters), ``"reconnected"`` (wakes may
        have been lost: sweep once), ``"lost"`` (the listen connection dropped: a note) or
        ``"listening"`` (the first listen is in place: a sweep already begun may have missed
        a write made before it; one not begun yet clears the wake when it begins)."""
        if kind in ("listening", "lost", "reconnected"):
            self._listen_answered = True
        if kind == "lost":
            self._say(detail or "the store's wake connection dropped; reconnecting")
            return
        if kind == "reconnected" and detail:
            self._say(detail)
        with self._lock:
            if self._woken_at is None:
                self._woken_at = self._clock.now_ms()
            if kind == "reconnected":
                self._why = "reconnected"
            if kind == "notify" and detail and self._named is not None:
                self._named.add(detail)
            else:
                self._named = None  # a wake that names no run: every run is looked at
        self._waiter.poke()

    def _say(self, message: str) -> None:
        """Keep a note for the watcher's own thread to print (an observer need not be
        thread-safe: a terminal's live status is not)."""
        with self._lock:
            self._notes.append(message)
        self._waiter.poke()

    def _flush_notes(self) -> None:
        with self._lock:
            notes, self._notes = self._notes, []
        for message in notes:
            self._observer.note(message)

    def listen_to(self, listen: Listen | None) -> None:
        """Take wakes from another store (the one a build that loaded late names); called
        from a sweep, on the watcher's own thread."""
        if self._listening is not None:
            self._listening.close()
            self._listening = None
        self._listen = listen
        if listen is not None:
            self._listening = listen(self.wake)

    def run(self) -> int:
        """Sweep until stopped; the number of sweeps made."""
        self._listening = self._listen(self.wake) if self._listen is not None else None
        try:
            if self._listening is not None:
                self._await_listen()
            self._loop()
        finally:
            if self._listening is not None:
                self._listening.close()
                self._listening = None
            if self._owned is not None:
                self._owned.close()
            closing = getattr(self._sweep, "close", None)  # a sweep's loop (SweepLoop)
            if callable(closing):
                closing()
        return self.sweeps

    def _await_listen(self) -> None:
        """Before the first sweep, wait (up to ``listen_wait_ms``) for the store to say its
        listen is in place — or that it failed: then the first sweep sees every write made
        before any wake could report it, and the ``listening`` wake is covered by it rather
        than being a second sweep at start. A listen slower than that is not waited for:
        its wake then sweeps again, as a wake must."""
        deadline = self._clock.now_ms() + self.settings.listen_wait_ms
        while not (self._halted() or self._listen_answered):
            now = self._clock.now_ms()
            if now >= deadline:
                return
            self._waiter.wait(deadline - now)

    def _loop(self) -> None:
        backoff = 0
        why = "start"
        last_start = self._clock.now_ms()
        while not self._halted():
            self._observer.sweeping(why)
            with self._lock:
                named = self._named if why == "wake" else None
                self._woken_at = None  # what woke it is covered by this sweep
                self._why = "wake"
                self._named = set()
            last_start = self._clock.now_ms()
            try:
                if named and self._sweep_runs is not None:
                    report = self._sweep_runs(self._halted, frozenset(named))
                else:
                    report = self._sweep(self._halted)
            except NotChecked as exc:  # a broken build: said, and tried again at the interval
                backoff = 0
                self.sweeps += 1
                at = self._clock.now_ms()
                next_ms = at + self.settings.every_ms
                self._observer.unchecked(exc.report, exc.reason, at, next_ms)
                why_next = "interval"
            except (ZukeError, OSError) as exc:  # the store, unreachable: try again later
                backoff = min(backoff * 2 or self.settings.backoff_ms, self.settings.every_ms)
                at = self._clock.now_ms()
                next_ms = at + backoff
                self._observer.failed(str(exc) or type(exc).__name__, at, next_ms)
                why_next = "retry"
            else:
                backoff = 0
                self.sweeps += 1
                at = self._clock.now_ms()
                next_ms = at + self.settings.every_ms
                self._observer.swept(report, at, next_ms)
                why_next = "interval"
            self._flush_notes()
            if self._halted():
                return
            self._observer.idle(next_ms)
            why = self._wait(next_ms, last_start, at) or why_next

    def _wait(self, next_ms: int, last_start: int, last_end: int) -> str | None:
        """Wait until ``next_ms`` or a wake's settled time; the wake's reason, or ``None``."""
        while not self._halted():
            if self._notes:
                self._flush_notes()
                self._observer.idle(next_ms)  # the note ended the status line: draw it again
            now = self._clock.now_ms()
            with self._lock:
                woken_at, why = self._woken_at, self._why
            due = next_ms
            if woken_at is not None:
                settled = max(woken_at + self.settings.settle_ms,
                              last_start + self.settings.min_gap_ms,
                              last_end + (last_end - last_start))  # fmt: skip
                due = min(due, settled)
            if now >= due:
                return why if due < next_ms else None
            self._waiter.wait(due - now)
        return None


def watch(
    build_cls: type[Build],
    store: StateStore,
    *,
    resume: ResumeOptions,
    run: RunOptions,
    settings: WatchSettings | None = None,
    waiter: Waiter | None = None,
    observer: WatchObserver | None = None,
) -> Watcher:
    """A :class:`Watcher` of this build's runs in ``store`` (call ``run()`` on it).

    Each sweep is ``resume_check_async`` on the watcher's one loop (:class:`SweepLoop`),
    of the runs a wake named when it named them; the store's ``listen`` is used when it
    has one."""
    sweeps = _Sweeps(build_cls, store, resume, run)
    listen = getattr(store, "listen", None)
    return Watcher(
        sweeps,
        settings=settings,
        clock=run.clock,
        waiter=waiter,
        observer=observer,
        listen=listen if callable(listen) else None,
        sweep_runs=sweeps.runs,
    )


class _Sweeps(SweepLoop):
    """:func:`watch`'s sweeps: every run, or the named ones, on one loop."""

    def __init__(
        self, build_cls: type[Build], store: StateStore, resume: ResumeOptions, run: RunOptions
    ) -> None:
        super().__init__()
        self._build, self._store, self._resume, self._options = build_cls, store, resume, run

    def __call__(self, stop: Callable[[], bool]) -> SweepReport:
        return self.runs(stop, None)

    def runs(self, stop: Callable[[], bool], named: frozenset[str] | None) -> SweepReport:
        from zuke.runs.sweep import resume_check_async

        return self.run(resume_check_async(self._build, self._store, resume=self._resume,
                                           run=self._options, stop=stop, runs=named))  # fmt: skip


__all__ = [
    "DEFAULT_EVERY_MS",
    "NotChecked",
    "PipeWaiter",
    "RunsSweepFn",
    "SweepLoop",
    "Waiter",
    "WatchObserver",
    "WatchSettings",
    "Watcher",
    "watch",
]
