"""``zuke resume --check --watch``: the long-lived sweeper, on a terminal or in a log.

The loop is :mod:`zuke.runs.watch`; this module parses ``--every``, installs
the SIGTERM/SIGINT handlers (stop after the run in hand, exit 0 with one
line) and renders what the watcher says: each sweep's report as ``zuke resume
--check`` prints it (``--json``: one JSON object per line), a failed sweep as
one ``zuke:`` line on stderr, and on a terminal a live status between sweeps
(last sweep, runs checked, next sweep due) drawn by ``rich``, which is
imported only then.
"""

from __future__ import annotations

import json
import signal
import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from zuke._clock import iso
from zuke._duration import format_duration, parse_duration
from zuke._errors import DurationError, UsageError
from zuke.runs.watch import DEFAULT_EVERY_MS, WatchObserver, WatchSettings, watch

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


class Lines(WatchObserver):
    """Plain lines: each sweep's report as ``resume --check`` prints it; failures on stderr."""

    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        redact: Callable[[str], str],
        render: Callable[[SweepReport], str],
    ) -> None:
        self.out, self.err, self.redact, self.render = out, err, redact, render

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        self.out.write(self.render(report) + "\n")
        self.out.flush()

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        wait = format_duration(next_ms - at_ms)
        self.err.write(f"zuke: the sweep failed: {self.redact(message)}; next try in {wait}\n")
        self.err.flush()

    def note(self, message: str) -> None:
        self.err.write(f"zuke: {self.redact(message)}\n")
        self.err.flush()


class JsonLines(Lines):
    """``--json``: one object per sweep on one line — the report's, with ``at`` and ``next``."""

    def swept(self, report: SweepReport, at_ms: int, next_ms: int) -> None:
        self._line({**report.as_json(), "at": iso(at_ms), "next": iso(next_ms)})

    def failed(self, message: str, at_ms: int, next_ms: int) -> None:
        super().failed(message, at_ms, next_ms)
        self._line({"ok": False, "error": self.redact(message), "at": iso(at_ms),
                    "next": iso(next_ms)})  # fmt: skip

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
        self._wakes = wakes
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

    def idle(self, next_ms: int) -> None:
        sooner = " (sooner on a signal)" if self._wakes else ""
        text = f"Watching — {self._last} · next sweep {_clock_time(next_ms)}{sooner}"
        self._stop()
        self._status = self._console.status(self.redact(text))
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


def run_watch(
    build: type[Build],
    store: StateStore,
    *,
    resume: ResumeOptions,
    options: RunOptions,
    every_ms: int,
    as_json: bool,
    out: TextIO,
    err: TextIO,
    redact: Callable[[str], str],
    render: Callable[[SweepReport], str],
) -> int:
    """Sweep until SIGTERM or Ctrl-C; then one line and exit 0."""
    wakes = callable(getattr(store, "listen", None))
    observer: Lines
    if as_json:
        observer = JsonLines(out, err, redact, render)
    elif getattr(out, "isatty", lambda: False)():
        observer = LiveStatus(out, err, redact, render, wakes=wakes)
    else:
        observer = Lines(out, err, redact, render)
    # The engine's own handlers would cancel a run the sweep resumed: here a signal only
    # stops the watcher, after the run in hand.
    run = replace(options, handle_signals=False)
    watcher = watch(build, store, resume=resume, run=run,
                    settings=WatchSettings(every_ms=every_ms), observer=observer)  # fmt: skip
    received: list[str] = []

    def on_signal(signum: int, frame: object) -> None:  # only sets a flag and pokes a pipe
        received.append(signal.Signals(signum).name)
        watcher.stop()

    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        sweeps = watcher.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if isinstance(observer, LiveStatus):
            observer.close()
    why = received[0] if received else "a stop"
    err.write(f"zuke: {why}: the watcher stopped after {sweeps} sweep(s)\n")
    err.flush()
    return 0


__all__ = ["parse_every", "run_watch"]
