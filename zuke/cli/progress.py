"""Live progress on a terminal (rich): fan-outs, and a sweep over many runs; plain when piped.

On a terminal, each running fan-out is one live line — items done, failed,
running and waiting, and the slowest item in flight with how long it has run so far
(counted on at every refresh, not frozen at the last event) — drawn by ``rich``,
which is imported only then; what the line shows is plain text (no rich markup), and a
name is one line's worth (:func:`zuke._inert.console_text`). Piped, a fan-out prints a
line when it starts and one when it ends, and every stage prints its own lines as any target
does, so a log reads top to bottom. A sweep (``zuke resume --check``) on a
terminal shows ``Sweeping … 12/300 runs checked`` while it works, gone before
its report prints; piped, or with ``--json``, it prints only the report.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TextIO

from zuke._duration import format_duration
from zuke._engine.observer import FanOutProgress, Observer
from zuke._inert import console_text

if TYPE_CHECKING:
    from collections.abc import Callable

    from zuke._engine.plan import Plan


def start_line(p: FanOutProgress) -> str:
    if p.total == 0:
        return f"{console_text(p.target)}: fan-out over 0 items — nothing to run."
    return f"{console_text(p.target)}: fan-out over {p.total} item(s)."


def end_line(p: FanOutProgress) -> str:
    parts = [f"{p.succeeded} succeeded"]
    if p.failed:
        parts.append(f"{p.failed} failed")
    if p.waiting:
        parts.append(f"{p.waiting} waiting")
    left = p.total - p.succeeded - p.failed - p.waiting
    if left > 0:
        parts.append(f"{left} not finished")
    return f"{console_text(p.target)}: {p.total} item(s): {', '.join(parts)}."


def status_text(p: FanOutProgress, slowest_ms: float | None = None) -> str:
    """The live line's counters: ``12/300 done · 1 failed · 8 running · slowest api (4s)``;
    ``slowest_ms``: how long the slowest item has run by now (default: as the event said)."""
    text = f"{p.succeeded + p.failed}/{p.total} done"
    if p.failed:
        text += f" · {p.failed} failed"
    text += f" · {p.running} running"
    if p.waiting:
        text += f" · {p.waiting} waiting"
    if p.slowest is not None:
        key, ms = p.slowest
        elapsed = ms if slowest_ms is None else slowest_ms
        text += f" · slowest {console_text(key)} ({format_duration(elapsed)})"
    return text


class _Status:
    """A fan-out's live counters; the slowest item's time is counted on from when the event
    was seen (a line otherwise shows the 0 ms an item had when it started, until the next
    item ends)."""

    def __init__(self, p: FanOutProgress, seen_s: float, redact: Callable[[str], str]) -> None:
        self.p, self.seen_s, self.redact = p, seen_s, redact

    def text(self, now_s: float) -> str:
        slowest = None
        if self.p.slowest is not None and not self.p.finished:
            slowest = self.p.slowest[1] + max(now_s - self.seen_s, 0.0) * 1000
        return self.redact(status_text(self.p, slowest))


class LiveFanOuts:
    """One rich progress line per fan-out, while any runs (a terminal only). ``now``: the
    monotonic clock the slowest item's time is counted on (a test's, to move it)."""

    def __init__(
        self,
        out: TextIO,
        redact: Callable[[str], str],
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, ProgressColumn, Task, TextColumn
        from rich.table import Column
        from rich.text import Text

        class StatusColumn(ProgressColumn):
            """The counters, worked out at each refresh (the slowest item's time runs on)."""

            def render(self, task: Task) -> Text:
                status = task.fields.get("status")
                return Text(status.text(now()) if isinstance(status, _Status) else "")

        self._redact = redact
        self._now = now
        self._console = Console(file=out)
        self._progress = Progress(
            TextColumn("{task.description}", markup=False),
            BarColumn(),
            StatusColumn(table_column=Column(no_wrap=True)),
            console=self._console,
            transient=True,
        )
        self._tasks: dict[str, Any] = {}
        self._live = False

    def status(self, target: str) -> str:
        """What the line of ``target``'s fan-out says now."""
        task = self._progress.tasks[self._tasks[target]]
        status = task.fields.get("status")
        return status.text(self._now()) if isinstance(status, _Status) else ""

    def update(self, p: FanOutProgress) -> None:
        if p.target not in self._tasks:
            if not self._live:
                self._progress.start()
                self._live = True
            self._tasks[p.target] = self._progress.add_task(
                self._redact(console_text(p.target)), total=max(p.total, 1), status=None
            )
        task = self._tasks[p.target]
        status = _Status(p, self._now(), self._redact)
        self._progress.update(task, completed=p.succeeded + p.failed, status=status)
        if p.finished:
            self._progress.remove_task(task)
            del self._tasks[p.target]
            if not self._tasks:
                self.stop()

    @property
    def active(self) -> bool:
        return self._live

    def log(self, text: str) -> None:
        """Print ``text`` (already styled) above the live lines."""
        from rich.text import Text

        self._console.print(Text.from_ansi(text), soft_wrap=True)

    def stop(self) -> None:
        if self._live:
            self._progress.stop()
            self._live = False


def on_terminal(stream: TextIO, force: bool | None = None) -> bool:
    """Whether live progress may be drawn on ``stream``: a terminal (``force`` decides instead,
    for tests and callers that know better); never when it is a pipe or a file."""
    if force is not None:
        return force
    return bool(getattr(stream, "isatty", lambda: False)())


class SweepProgress:
    """One live line while a sweep goes through many runs: ``12/300 runs checked`` (rich, a
    terminal only). It steps aside while a run it resumed runs (:meth:`pause`, called by
    :class:`PauseOnRun`), so the run's own lines print as they do anywhere."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._progress: Any = None
        self._task: Any = None

    def update(self, done: int, total: int) -> None:
        if total == 0:
            return
        if self._progress is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

            self._progress = Progress(
                TextColumn("Sweeping"), BarColumn(), MofNCompleteColumn(),
                TextColumn("runs checked"), console=Console(file=self._out), transient=True,
            )  # fmt: skip
            self._task = self._progress.add_task("sweep", total=total)
            self._progress.start()
        self._progress.update(self._task, completed=done, total=total)
        if done >= total:
            self.pause()

    @property
    def active(self) -> bool:
        """Whether the live line is drawn now."""
        return self._progress is not None

    def pause(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


class PauseOnRun(Observer):
    """Stops the sweep's live line when a run it resumed starts, before its first line."""

    def __init__(self, progress: SweepProgress) -> None:
        self._progress = progress

    async def run_started(self, run_id: str, plan: Plan) -> None:
        self._progress.pause()
