"""Console output of a run: a header per target, a summary table, a failure footer.

Colour only when the stream is a terminal and ``NO_COLOR`` is unset, so piped
output stays plain text. Every line passes through the run's redactor. Names and errors may
quote what anyone wrote (a fan-out item's key, a deny reason, a remote service's answer):
each is one line's worth (:func:`zuke._inert.console_text`), and a traceback's lines are
escaped one by one.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime
from typing import TextIO

from zuke._duration import format_duration
from zuke._engine.observer import FanOutProgress, Observer, Transition
from zuke._engine.plan import Plan
from zuke._engine.result import RunResult
from zuke._inert import console_text as inert
from zuke._redact import Redactor
from zuke.cli.hints import resume_commands
from zuke.cli.progress import LiveFanOuts, end_line, start_line

_LABELS = {
    "succeeded": "Succeeded",
    "failed": "Failed",
    "skipped": "Skipped",
    "waiting": "Waiting",
    "pending": "Pending",
    "running": "Running",
}


class Style:
    """ANSI styling that degrades to plain text."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO) -> Style:
        isatty = getattr(stream, "isatty", lambda: False)()
        return cls(bool(isatty) and not os.environ.get("NO_COLOR"))

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.enabled else text

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)


class ConsoleReporter(Observer):
    """Prints a run as it happens."""

    #: its lines say what the run does, not what is recorded: printed while the write is out
    before_recorded = True

    def __init__(
        self,
        *,
        out: TextIO | None = None,
        err: TextIO | None = None,
        redactor: Redactor | None = None,
        live: bool | None = None,
    ) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.style = Style.for_stream(self.out)
        self.redactor = redactor or Redactor()
        self.plan: Plan | None = None
        #: a terminal shows fan-outs as live progress lines (rich); piped output is plain
        self.live_progress = self.style.enabled if live is None else live
        self._live_view: LiveFanOuts | None = None
        self._fanning: set[str] = set()

    def line(self, text: str = "", *, err: bool = False) -> None:
        if self._live_view is not None and self._live_view.active:
            self._live_view.log(self.redactor.text(text))  # above the live lines
            return
        stream = self.err if err else self.out
        stream.write(self.redactor.text(text) + "\n")

    async def run_started(self, run_id: str, plan: Plan) -> None:
        self.plan = plan

    async def fan_out(self, p: FanOutProgress) -> None:
        started = p.total == 0 or (not p.finished and p.target not in self._fanning)
        if self.live_progress:
            if started:
                self.line(start_line(p))
            if p.total:
                self._live().update(p)
            self._fanning.add(p.target)
            if p.finished:
                self._fanning.discard(p.target)
                if p.total:
                    self.line(end_line(p))
            return
        if started:
            self.line(start_line(p))
            self._fanning.add(p.target)
        elif p.finished and p.total:
            self._fanning.discard(p.target)
            self.line(end_line(p))

    def _live(self) -> LiveFanOuts:
        if self._live_view is None:
            self._live_view = LiveFanOuts(self.out, self.redactor.text)
        return self._live_view

    def _quiet(self, t: Transition) -> bool:
        """On a terminal a fan-out's stages show as its live line, not a line each."""
        return self.live_progress and "[" in t.target and t.status in ("running", "succeeded")

    async def transition(self, t: Transition) -> None:
        s = self.style
        if self._quiet(t):
            return
        name = inert(t.target)
        if t.status == "running":
            self.line(s.bold(f"══ {name} ══"))
            self.out.flush()
        elif t.status == "succeeded":
            self.line(s.green(f"✔ {name} succeeded in {format_duration(t.duration_ms or 0)}"))
        elif t.status == "failed":
            self.out.flush()
            self.line(s.red(f"✘ {name} failed in {format_duration(t.duration_ms or 0)}"), err=True)
            if t.detail:
                for detail_line in t.detail.rstrip("\n").split("\n"):
                    self.line(s.dim(f"    {inert(detail_line)}"), err=True)
            elif t.error:
                self.line(f"    {inert(t.error)}", err=True)
            self.err.flush()
        elif t.status == "waiting":
            what = t.waiting_for.trigger if t.waiting_for else (t.reason or "a trigger")
            self.line(s.yellow(f"⏸ {name} waiting for {inert(what)}"))

    async def run_finished(self, result: RunResult) -> None:
        if self._live_view is not None:
            self._live_view.stop()
        self.summary(result)

    def summary(self, result: RunResult) -> None:
        s = self.style
        rows = [
            (
                inert(name, tabs=False),
                _LABELS.get(o.status, o.status),
                format_duration(o.duration_ms) if o.duration_ms is not None else "—",
            )
            for name, o in result.outcomes.items()
        ]
        width = max([len("Target"), *(len(r[0]) for r in rows)])
        self.line()
        self.line(s.bold("Build Summary"))
        self.line(f"{'Target':<{width}}  {'Status':<10}  Duration")
        colours = {"Succeeded": s.green, "Failed": s.red}
        for name, label, duration in rows:
            colour = colours.get(label, s.dim)
            self.line(f"{name:<{width}}  {colour(f'{label:<10}')}  {duration}")
        self.line(f"{'Total':<{width}}  {'':<10}  {format_duration(result.duration_ms)}")
        self.line()
        self._footer(result)
        if result.stop_reason:
            self.line(s.red(inert(result.stop_reason)), err=True)
        self.line(self._closing(result))
        if result.status == "suspended" and result.recorded:
            self.line(f"Run {result.run_id} is suspended. Resume it with:")
            for line in resume_commands(result.run_id, result.waiting):
                self.line(inert(line))
        elif result.recorded:
            self.line(s.dim(f"Run {result.run_id} (zuke runs show {result.run_id})"))
        self.out.flush()

    def _footer(self, result: RunResult) -> None:
        failures = result.failures
        if not failures:
            return
        self.out.flush()
        self.line(self.style.red("Failures:"), err=True)
        for name, outcome in failures.items():  # its error on one line: the traceback is above
            self.line(f"  {inert(name)}: {inert(outcome.error or 'failed')}", err=True)
        self.line(err=True)
        self.err.flush()

    def _closing(self, result: RunResult) -> str:
        s = self.style
        stamp = datetime.now().strftime("%Y-%m-%d %H:%M")
        total = len(result.outcomes)
        done = sum(1 for o in result.outcomes.values() if o.status == "succeeded")
        elapsed = format_duration(result.duration_ms)
        if result.record_error is not None and result.status in ("succeeded", "suspended"):
            # Never "Build succeeded" for a run whose record did not land.
            return s.red(
                f"✘ Run not recorded — {done}/{total} targets succeeded in {elapsed}, but the "
                f"run record could not be written  ({stamp})"
            )
        if result.status == "succeeded":
            return s.green(f"✔ Build succeeded — {done}/{total} targets in {elapsed}  ({stamp})")
        if result.status == "suspended":
            waiting = sum(1 for o in result.outcomes.values() if o.status == "waiting")
            return s.yellow(
                f"⏸ Build suspended — {waiting} target(s) waiting after {elapsed}  ({stamp})"
            )
        if result.status == "cancelled":
            return s.red(f"✘ Build cancelled after {elapsed}  ({stamp})")
        failed = list(result.failures)
        culprit = (
            f"'{inert(failed[0])}' failed" if len(failed) == 1 else f"{len(failed)} targets failed"
        )
        if not failed:
            culprit = "no target failed, but some were not reached"
        return s.red(f"✘ Build failed — {culprit} after {elapsed}  ({stamp})")
