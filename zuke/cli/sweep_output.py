"""How ``zuke resume --check`` prints a sweep: a line per run and a closing count (or
JSON), the one ``zuke:`` line for a store that failed, and the report of a sweep whose
build file would not load."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from zuke._errors import BuildDefinitionError, RunNotFoundError, UsageError
from zuke._inert import console_text
from zuke.cli import args as cli_args
from zuke.cli.invocation import naming_store, needs_build, store_where

if TYPE_CHECKING:
    from zuke.runs.sweep_report import SweepReport
    from zuke.state._protocol import StateStore


def write_report(report: SweepReport, store: StateStore, *, as_json: bool, out: TextIO) -> None:
    """The report on ``out`` (a sweep that found nothing names the store it looked in)."""
    where = store_where(store) if not report.entries else None
    text = json.dumps(report.as_json(), indent=2) if as_json else sweep_text(report, where)
    out.write(text + "\n")
    out.flush()


def store_failures(report: SweepReport, err: TextIO) -> None:
    """One ``zuke:`` line when the store failed under some runs: they are left as they were,
    for the next sweep (each run's line above says what the store said)."""
    if report.store_failures:
        err.write(
            f"zuke: the state store failed for {report.store_failures} run(s) (see above); "
            "each is left as it was: run `zuke resume --check` again once the store answers\n"
        )
        err.flush()


def access_failures(report: SweepReport, err: TextIO) -> None:
    """One ``zuke:`` line when a gate's service refused this sweep's credentials (a token
    GitHub refuses): it names the credential and what to check; the runs are left waiting."""
    refused = report.access_failures
    if refused:
        first = refused[0].detail or "its service refused the credentials"
        more = f" (and {len(refused) - 1} more run(s), see above)" if len(refused) > 1 else ""
        err.write(f"zuke: the sweep could not check run {refused[0].run_id}{more}: {first}; "
                  "each is left waiting as it was\n")  # fmt: skip
        err.flush()


def check_without_build(
    problem: BuildDefinitionError,
    rest: list[str],
    switches: set[str],
    *,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path,
) -> int:
    """``resume --check`` with a build that fails to load: nothing is moved (reaping, a
    timeout's disposition and a resume may all run the build's code), every run that needed
    a check is reported not checked, with the reason, and the exit is 1."""
    from zuke.runs.store import open_store
    from zuke.runs.sweep_report import unchecked_report

    try:  # the build's parameter flags are unknown without it: then every run is listed
        operands = cli_args.parse(rest, []).targets
    except UsageError:
        operands = []
    run_id = operands[0] if operands else None
    store = open_store(env, cwd=home)
    reason = str(needs_build(problem, "zuke resume --check", "to check the run's gates"))
    try:
        report = unchecked_report(store, run_id, reason)
    except RunNotFoundError as exc:
        raise naming_store(exc, store) from None
    write_report(report, store, as_json="--json" in switches, out=out)
    err.write(f"zuke: {console_text(reason)}\n")
    err.flush()
    return 1


def sweep_text(report: SweepReport, where: str | None = None) -> str:
    """The sweep's lines and its closing count (``where``: the store, named when it held no
    run to check)."""
    lines = []
    for e in report.entries:  # each value may quote what anyone wrote: one line each
        gate = f" [{console_text(e.gate)}]" if e.gate else ""
        detail = f" — {console_text(e.detail)}" if e.detail else ""
        mark = " (error)" if e.errored else ""
        lines.append(f"{console_text(e.run_id)} {console_text(e.build)}{gate}: {e.action} → "
                     f"{console_text(e.result)}{mark}{detail}")  # fmt: skip
    c = report.counts()
    lines.append(
        f"Checked {c['checked']} suspended run(s){f' in {console_text(where)}' if where else ''}: "
        f"{c['resumed']} resumed, "
        f"{c['still_waiting']} still waiting, {c['timed_out']} timed out, "
        f"{c['gate_failed']} gate(s) failed, "
        f"{c['deferred']} deferred, {c['failed']} failed"
        f"; reaped {c['reaped']}, skipped {c['skipped']}, {c['errors']} check error(s)"
        + (f"; {c['not_checked']} not checked." if c["not_checked"] else ".")
    )
    return "\n".join(lines)
