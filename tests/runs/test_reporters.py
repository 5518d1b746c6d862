"""The ``RunReporter`` seam (issue 26 §2): told of each move from whichever process makes it,
remembering in the record without a lease, never failing the run."""

from __future__ import annotations

from typing import Any

import pytest

from tests.runs.support import HOUR, Harness, approval, release_build
from zuke import BuildDefinitionError, ReportContext, RunReport, RunReporter
from zuke._clock import ManualClock
from zuke.runs.cancel import cancel_run
from zuke.state.memory import MemoryStateStore


class Recorder(RunReporter):
    """Logs (kind, target, run status, what the gate waits for) and remembers each report."""

    name = "recorder"

    def __init__(self, log: list[tuple[Any, ...]], *, fail_on: str | None = None) -> None:
        self.log = log
        self.fail_on = fail_on

    async def report(self, report: RunReport, ctx: ReportContext) -> None:
        if report.kind == self.fail_on:
            raise RuntimeError(f"chat is down (token=hunter2-secret-value) at {report.kind}")
        record = report.record
        waiting = sorted(n for n, t in record.targets.items() if t.status == "waiting")
        self.log.append((report.kind, report.target, record.status, tuple(waiting)))


def harness(reporters: list[RunReporter], **kw: Any) -> Harness:
    store = MemoryStateStore()
    extra = {"reporters": lambda self: reporters, **kw.pop("extra", {})}
    build = release_build(store, [], extra=extra, **kw)
    return Harness(build, store, ManualClock(1_000_000))


def kinds(log: list[tuple[Any, ...]]) -> list[str]:
    return [entry[0] for entry in log]


def test_the_live_process_reports_creation_each_target_and_the_suspension() -> None:
    log: list[tuple[Any, ...]] = []
    h = harness([Recorder(log)])
    result = h.start("release")
    assert result.status == "suspended"
    assert log[0] == ("created", None, "running", ())
    assert ("target-started", "deploy", "running", ()) in log
    assert ("target-ended", "deploy", "running", ()) in log
    assert log[-1] == ("suspended", None, "suspended", ("approve",))
    # the resumer's process reports the rest, to the end
    log.clear()
    h.resume(result.run_id, "approved")
    assert kinds(log)[0] == "resumed"
    assert ("target-started", "promote", "running", ()) in log
    last: tuple[Any, ...] = log[-1]
    assert last[0] == "finished" and last[2] == "succeeded"


def test_a_sweep_reports_each_run_it_looked_at_and_one_it_settled() -> None:
    log: list[tuple[Any, ...]] = []
    h = harness([Recorder(log)], gate=approval(timeout="1h", on_timeout="cancel-run"))
    run_id = h.start("release").run_id
    log.clear()
    h.sweep()
    assert log == [("swept", None, "suspended", ("approve",))]
    log.clear()
    h.clock.advance(2 * HOUR)
    h.sweep()
    assert log[-1][0] == "swept" and log[-1][2] == "cancelled"
    assert h.record(run_id).status == "cancelled"


def test_zuke_cancel_of_a_suspended_run_reports_it_cancelled() -> None:
    log: list[tuple[Any, ...]] = []
    h = harness([Recorder(log)])
    run_id = h.start("release").run_id
    log.clear()
    result = cancel_run(h.store, run_id, actor="ops", build=h.build, env={})
    assert result.status == "cancelled"
    assert log == [("cancelled", None, "cancelled", ())]


def test_a_reporter_that_raises_never_fails_the_run_and_is_said_redacted() -> None:
    log: list[tuple[Any, ...]] = []
    failing = Recorder([], fail_on="target-started")
    failing.name = "flaky"
    h = harness([failing, Recorder(log)])
    result = h.start("release", params={"token": ["hunter2-secret-value"]})
    assert result.status == "suspended"
    failures = [w for w in h.warnings if "reporter 'flaky' failed" in w]
    assert failures and all("hunter2" not in w for w in failures)
    assert "the next sweep reports it again" in failures[0]
    assert log[-1][0] == "suspended"  # the next reporter was still told


def test_remember_is_durable_in_the_record_and_recall_reads_it_back() -> None:
    seen: list[Any] = []

    class Keeper(RunReporter):
        name = "keeper"

        async def report(self, report: RunReport, ctx: ReportContext) -> None:
            if report.kind == "created":
                await ctx.remember("deployment:staging", {"id": "42"}, note="deployment 42")
            if report.kind == "suspended":
                seen.append(ctx.recall("deployment:staging"))
                seen.append(ctx.recall("deployment:production"))

    h = harness([Keeper()])
    run_id = h.start("release").run_id
    assert seen == [{"id": "42"}, None]
    (event,) = [e for e in h.record(run_id).events if e.tool == "report:keeper"]
    assert event.args == {"key": "deployment:staging", "id": "42"}
    assert event.detail == "deployment 42"


def test_reporters_must_be_run_reporters_with_names_of_their_own() -> None:
    for reporters, says in (
        (["chat"], "is not a RunReporter"),
        ([Recorder([]), Recorder([])], "two reporters are named 'recorder'"),
    ):
        h = harness(reporters)  # type: ignore[arg-type]
        with pytest.raises(BuildDefinitionError, match=says):
            h.start("release")
        assert h.store.list_runs() == []  # refused before any record was written
