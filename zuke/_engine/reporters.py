"""Telling a build's :class:`~zuke.RunReporter` s of a run's moves, in any process.

:func:`tell` is the one caller: it hands each reporter a :class:`~zuke.RunReport` and a
:class:`~zuke.ReportContext` whose ``remember`` is an append to the record (an event, no
lease: :func:`~zuke.state.update.update_run` re-reads on a conflict with the run's own
writer), and it contains every failure — a reporter that raises is reported in one redacted
line and the run goes on (issue 26 §2: a reporter never fails a release). The live process
tells them through :class:`ReporterObserver` (beside the state writer, never before it); a
sweep and ``zuke cancel`` through :mod:`zuke.runs.reporting`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from zuke._clock import SYSTEM_CLOCK, Clock, iso
from zuke._engine.observer import Observer, Transition
from zuke._engine.record import ci_run_url
from zuke._errors import BuildDefinitionError, RunNotFoundError
from zuke._reporting import ReportContext, ReportKind, RunReport, RunReporter
from zuke.state.records import RunDelta, RunEvent, RunRecord
from zuke.state.update import Updated, update_run

if TYPE_CHECKING:
    from zuke._build import Build
    from zuke._engine.plan import Plan
    from zuke._engine.result import RunResult
    from zuke._engine.writer import RunStateWriter
    from zuke._redact import Redactor
    from zuke.state._protocol import StateStore


def reporters_of(build: Build) -> list[RunReporter]:
    """``build.reporters()``, checked: each one a :class:`RunReporter` with a name of its own."""
    found = list(build.reporters() or ())
    names: set[str] = set()
    for reporter in found:
        if not isinstance(reporter, RunReporter):
            raise BuildDefinitionError(
                f"{type(build).__name__}.reporters(): {reporter!r} is not a RunReporter "
                "(subclass zuke.RunReporter, or use zuke_gh.github_deployments(...))"
            )
        if reporter.name in names:
            raise BuildDefinitionError(
                f"{type(build).__name__}.reporters(): two reporters are named "
                f"{reporter.name!r}; give each its own name (it keys what it remembers)"
            )
        names.add(reporter.name)
    return found


class Teller:
    """Where reports of one run go, and what their contexts write with."""

    def __init__(
        self,
        reporters: Sequence[RunReporter],
        *,
        store: StateStore,
        run_id: str,
        redactor: Redactor,
        env: Mapping[str, str],
        actor: str,
        warn: Callable[[str], None],
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.reporters = list(reporters)
        self.store = store
        self.run_id = run_id
        self.redactor = redactor
        self.env = env
        self.actor = actor
        self.warn = warn
        self.clock = clock
        #: the record as last read or written here (``None``: read it again)
        self.known: RunRecord | None = None

    def stored(self) -> RunRecord:
        """The record as stored: the one this teller last read or wrote, else read now."""
        if self.known is None:
            found = self.store.get_run(self.run_id)
            if found is None:
                raise RunNotFoundError(f'no run "{self.run_id}" in the store',
                                       run_id=self.run_id)  # fmt: skip
            self.known = found.record
        return self.known

    def _append(self, tool: str, key: str, values: Mapping[str, str], note: str | None) -> None:
        text = self.redactor.text
        event = RunEvent(
            at=iso(self.clock.now_ms()),
            tool=tool,
            actor=self.actor,
            args={"key": key, **{k: text(str(v)) for k, v in values.items()}},
            detail=text(note) if note else None,
        )
        outcome = update_run(
            self.store, self.run_id, lambda r: RunDelta(updated_at=event.at, events=(event,))
        )
        if not isinstance(outcome, Updated):  # every attempt conflicted: it was not kept
            self.known = None
            raise RuntimeError(f"could not remember {key!r} in run {self.run_id}")
        self.known = outcome.record

    def context(self, reporter: RunReporter) -> ReportContext:
        tool = f"report:{reporter.name}"

        async def remember(key: str, values: Mapping[str, str], note: str | None) -> None:
            await asyncio.to_thread(self._append, tool, key, values, note)

        return ReportContext(
            reporter.name,
            remember=remember,
            recall=self.stored,
            redact=self.redactor.text,
            env=self.env,
            job_url=ci_run_url(self.env),
            warn=self.warn,
        )

    async def tell(
        self, kind: ReportKind, view: Callable[[], RunRecord], *, target: str | None = None
    ) -> int:
        """Report to each reporter in turn; the number that failed (each said in one line)."""
        report = RunReport(kind, view, target=target)
        self.known = None  # the run may have moved since the last report: read it when asked
        failed = 0
        for reporter in self.reporters:
            try:
                await reporter.report(report, self.context(reporter))
            except Exception as exc:  # a reporter mirrors: it never fails the run
                failed += 1
                self.warn(
                    self.redactor.text(
                        f"zuke: reporter {reporter.name!r} failed on {kind} of run "
                        f"{self.run_id}: {exc}; the run goes on, and the next sweep reports "
                        "it again"
                    )
                )
        return failed


class ReporterObserver(Observer):
    """The live process's reports: the run created or resumed, each target started and
    ended, the run suspended or finished — each shown the writer's view of the record."""

    def __init__(self, teller: Teller, writer: RunStateWriter, *, resumed: bool) -> None:
        self.teller = teller
        self.writer = writer
        self.resumed = resumed

    async def run_started(self, run_id: str, plan: Plan) -> None:
        await self.teller.tell("resumed" if self.resumed else "created", self.writer.view)

    async def transition(self, t: Transition) -> None:
        if t.status == "running":
            await self.teller.tell("target-started", self.writer.view, target=t.target)
        elif t.status in ("succeeded", "failed", "skipped"):
            await self.teller.tell("target-ended", self.writer.view, target=t.target)

    async def run_finished(self, result: RunResult) -> None:
        kind: ReportKind = "suspended" if result.status == "suspended" else "finished"
        await self.teller.tell(kind, self.writer.view)


__all__ = ["ReporterObserver", "Teller", "reporters_of"]
