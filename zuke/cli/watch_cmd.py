"""``zuke resume --check --watch``: the long-lived sweeper, on a terminal or in a log.

The loop is :mod:`zuke.runs.watch`; this module parses ``--every``, installs
the SIGTERM/SIGINT handlers (stop after the run in hand, exit 0 with one
line) and renders what the watcher says: each sweep's report as ``zuke resume
--check`` prints it, each line led by the sweep's time (ISO 8601, UTC, to the second:
``2026-05-01T12:03:05Z``), a failed sweep as one ``zuke:`` line on stderr with its time
(``--json``: one JSON object per line, with ``at``), and on a terminal a live status
between sweeps (last sweep, runs checked, next sweep due) drawn by ``rich``, which is
imported only then. Messages (a store's error, a build's) are made inert
(:func:`zuke._inert.console_text`) after redaction.

A sweeper must outlive a bad merge: :class:`BuildSweeps` reports each sweep's
runs not checked while the build cannot be used, and reads ``build.py`` again
before the next sweep, until it loads.
"""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TextIO

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._duration import format_duration, parse_duration
from zuke._errors import BuildDefinitionError, DurationError, UsageError, ZukeError
from zuke._inert import console_text
from zuke.runs.watch import (
    DEFAULT_EVERY_MS,
    Listen,
    NotChecked,
    SweepLoop,
    Waiter,
    Watcher,
    WatchObserver,
    WatchSettings,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from zuke._build import Build
    from zuke._engine.run import RunOptions
    from zuke.runs.continuation import ResumeOptions
    from zuke.runs.sweep_report import SweepReport
    from zuke.state._protocol import StateStore


def parse_every(text: str | None) -> int:
    """``--every``: a duration (default 5m); a bad one is a usage error naming it."""
    if text is None:
        return DEFAULT_EVERY_MS
    try:
        return parse_duration(text, what="--every")
    except DurationError as exc:
        raise UsageError(str(exc)) from None


def _clock_time(ms: int) -> str:
    return iso(ms)[11:19] + "Z"


def stamp(ms: int) -> str:
    """The time a watcher's text line carries: ISO 8601 in UTC, to the second."""
    return iso(ms)[:19] + "Z"


@dataclass(frozen=True)
class Ready:
    """A build that loaded and fits the command line: what its sweeps run with."""

    build: type[Build]
    resume: ResumeOptions
    options: RunOptions


class BuildSweeps(SweepLoop):
    """The watcher's sweep, for a build that a bad merge may break and a later one fix.

    While the build cannot be used — ``build.py`` does not load, its definitions
    raise, or the command line does not fit it — a sweep moves nothing (reaping,
    a timeout's disposition and a resume all run the build's code): it raises
    :class:`NotChecked` with every unsettled run in the store and the reason, and
    the next sweep calls ``load`` again (``build.py`` read afresh). A build in
    hand that sweeps is kept: the file is not read again while it works, so a
    later bad merge changes nothing until the watcher restarts.

    ``store`` is the one the watcher started with; a build that first loads
    later and names its own (``state_store()``) moves the sweeps there, and
    ``moved`` is told so the watcher listens to it instead.

    Every sweep runs on the watcher's one loop (:class:`~zuke.runs.watch.SweepLoop`);
    :meth:`runs` sweeps only the runs a wake named.
    """

    def __init__(
        self,
        store: StateStore,
        ready: Ready | None,
        *,
        load: Callable[[], type[Build]],
        prepare: Callable[[type[Build]], Ready],
        command: str = "zuke resume --check --watch",
    ) -> None:
        super().__init__()
        self.store = store
        self._ready = ready
        self._settled = ready is not None  # the store is the build's (or it has none)
        self._load, self._prepare, self._command = load, prepare, command
        self.moved: Callable[[StateStore], None] = lambda store: None

    def __call__(self, stop: Callable[[], bool]) -> SweepReport:
        return self.runs(stop, None)

    def runs(self, stop: Callable[[], bool], named: frozenset[str] | None) -> SweepReport:
        """A sweep of the ``named`` runs only (``None``: every run of the build)."""
        from zuke.runs.sweep import resume_check_async

        ready = self._ready or self._reload()
        # The engine's own signal handlers would cancel a run the sweep resumed: here a
        # signal only stops the watcher, after the run in hand.
        run = replace(ready.options, handle_signals=False)
        try:
            return self.run(resume_check_async(ready.build, self.store, resume=ready.resume,
                                               run=run, stop=stop, runs=named))  # fmt: skip
        except BuildDefinitionError as exc:  # its definitions raise: before anything moved
            self._ready = None
            raise self._not_checked(exc) from None

    def _reload(self) -> Ready:
        try:
            ready = self._prepare(self._load())
            if not self._settled:
                self._settle(ready.build)
        except ZukeError as exc:
            raise self._not_checked(exc) from None
        self._ready = ready
        return ready

    def _settle(self, build: type[Build]) -> None:
        try:
            own = build().state_store()
        except Exception as exc:  # a raising hook: the build cannot be used yet
            raise BuildDefinitionError(
                f"{build.__name__}.state_store() raised {type(exc).__name__}: {exc}"
            ) from None
        self._settled = True
        if own is not None and own is not self.store:
            self.store = own
            self.moved(own)

    def _not_checked(self, problem: ZukeError) -> NotChecked:
        from zuke.cli.invocation import needs_build
        from zuke.runs.sweep_report import unchecked_report

        reason = str(problem)
        if isinstance(problem, BuildDefinitionError):
            reason = str(needs_build(problem, self._command, "to check the run's gates"))
        return NotChecked(reason, unchecked_report(self.store, None, reason))


class Lines(WatchObserver):
    """Plain lines: each sweep's report as ``resume --check`` prints it; failures on stderr."""

    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        redact: Callable[[str], str],
        render: Callable[[SweepReport], str],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.out, self.err, self.redact, self.render = out, err, redact, render
        self.clock = clock

    def said(self, message: str) -> str:
        """A message for one line: redacted, then inert."""
        return console_text(self.redact(message))

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        when = stamp(at_ms)
        lines = self.render(report).split("\n")
        self.out.write("".join(f"{when} {line}\n" for line in lines))
        self.out.flush()

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        wait = format_duration(next_ms - at_ms)
        self.err.write(f"zuke: {stamp(at_ms)} the sweep failed: {self.said(message)}; "
                       f"next try in {wait}\n")  # fmt: skip
        self.err.flush()

    def unchecked(self, report: SweepReport, reason: str, at_ms: int, next_ms: int) -> None:
        self.swept(report, at_ms, next_ms)
        self._unchecked_line(reason, at_ms, next_ms)

    def _unchecked_line(self, reason: str, at_ms: int, next_ms: int) -> None:
        wait = format_duration(next_ms - at_ms)
        self.err.write(f"zuke: {stamp(at_ms)} {self.said(reason)}; nothing was moved; the "
                       f"build is read again at the next sweep, in {wait}\n")  # fmt: skip
        self.err.flush()

    def note(self, message: str) -> None:
        self.err.write(f"zuke: {stamp(self.clock.now_ms())} {self.said(message)}\n")
        self.err.flush()


class JsonLines(Lines):
    """``--json``: one object per sweep on one line — the report's, with ``at`` and ``next``."""

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        self._line({**report.as_json(), "at": iso(at_ms), "next": iso(next_ms)})

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        super().failed(message, at_ms, next_ms)
        self._line(
            {"ok": False, "error": self.redact(message), "at": iso(at_ms), "next": iso(next_ms)}
        )  # fmt: skip (JSON escapes its controls)

    def unchecked(self, report: SweepReport, reason: str, at_ms: int, next_ms: int) -> None:
        self._unchecked_line(reason, at_ms, next_ms)
        self._line({**report.as_json(), "ok": False, "error": self.redact(reason),
                    "at": iso(at_ms), "next": iso(next_ms)})  # fmt: skip

    def _line(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps(obj, separators=(",", ":")) + "\n")
        self.out.flush()


class LiveStatus(Lines):
    """On a terminal: the plain lines, and between sweeps one live status line (rich)."""

    def __init__(self, *args: Any, wakes: bool) -> None:
        super().__init__(*args)
        from rich.console import Console

        self._console = Console(file=self.out)
        self._status: Any = None
        self.wakes = wakes
        self._last = "no sweep yet"

    def sweeping(self, why: str) -> None:
        self._stop()

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        super().swept(report, at_ms, next_ms)
        c = report.counts()
        self._last = (
            f"last sweep {_clock_time(at_ms)}: {c['checked']} run(s) checked, "
            f"{c['resumed']} resumed, {c['still_waiting']} waiting"
        )

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        super().failed(message, at_ms, next_ms)
        self._last = f"last sweep {_clock_time(at_ms)} failed"

    def unchecked(self, report: SweepReport, reason: str, at_ms: int, next_ms: int) -> None:
        super().unchecked(report, reason, at_ms, next_ms)
        n = report.count("not-checked")
        self._last = (
            f"last sweep {_clock_time(at_ms)}: the build cannot be used, {n} run(s) not checked"
        )

    def idle(self, next_ms: int) -> None:
        sooner = " (sooner on a signal)" if self.wakes else ""
        text = f"Watching — {self._last} · next sweep {_clock_time(next_ms)}{sooner}"
        self._stop()
        self._status = self._console.status(self.said(text))
        self._status.start()

    def note(self, message: str) -> None:
        self._stop()
        super().note(message)

    def _stop(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def close(self) -> None:
        self._stop()


def _listen_of(store: StateStore) -> Listen | None:
    listen = getattr(store, "listen", None)
    return listen if callable(listen) else None


def run_watch(
    sweeps: BuildSweeps,
    *,
    every_ms: int,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    redact: Callable[[str], str],
    render: Callable[[SweepReport], str],
    clock: Clock = SYSTEM_CLOCK,
    waiter: Waiter | None = None,
) -> int:
    """Sweep until SIGTERM or Ctrl-C; then one line and exit 0 (``clock`` and ``waiter``:
    a test's, to drive the loop without sleeping)."""
    wakes = _listen_of(sweeps.store) is not None
    observer: Lines
    if as_json:
        observer = JsonLines(out, err, redact, render, clock)
    elif getattr(out, "isatty", lambda: False)():
        observer = LiveStatus(out, err, redact, render, clock, wakes=wakes)
    else:
        observer = Lines(out, err, redact, render, clock)
    settings = WatchSettings(every_ms=every_ms)
    watcher = Watcher(sweeps, settings=settings, clock=clock, waiter=waiter, observer=observer,
                      listen=_listen_of(sweeps.store), sweep_runs=sweeps.runs)  # fmt: skip

    def moved(store: StateStore) -> None:
        watcher.listen_to(_listen_of(store))
        if isinstance(observer, LiveStatus):
            observer.wakes = _listen_of(store) is not None

    sweeps.moved = moved
    received: list[str] = []

    def on_signal(signum: int, frame: object) -> None:  # only sets a flag and pokes a pipe
        received.append(signal.Signals(signum).name)
        watcher.stop()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        count = watcher.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if isinstance(observer, LiveStatus):
            observer.close()
    why = received[0] if received else "a stop"
    err.write(f"zuke: {why}: the watcher stopped after {count} sweep(s)\n")
    err.flush()
    return 0


__all__ = ["BuildSweeps", "Ready", "parse_every", "run_watch"]
