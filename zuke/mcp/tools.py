"""What each ``zuke mcp`` tool does, over the library, with no MCP SDK in sight.

:class:`BuildTools` holds the build, its environment and store, the server's
actor and which tools are enabled. Each tool returns a JSON value or raises
:class:`ToolFailure` with one line for the client; every call that concerns
a run is appended to that run's audit trail (:mod:`zuke.mcp.audit`), denied
and failed calls too. Nothing here writes to stdout: in ``zuke mcp`` stdout
is the MCP channel, so runs have no console observer and warnings go to
``warn`` (stderr).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._duration import parse_duration
from zuke._errors import ZukeError
from zuke._provenance import Actor, ActorSource
from zuke._redact import Redactor
from zuke.mcp.audit import record_call, redacted_args
from zuke.state._ids import check_id
from zuke.state.records import EventOutcome
from zuke.state.wire import shown_record_json, summary_to_json

if TYPE_CHECKING:
    from pathlib import Path

    from zuke._build import Build
    from zuke._engine.plan import BuildGraph
    from zuke._engine.result import RunResult
    from zuke._engine.run import RunOptions
    from zuke._params import Parameter
    from zuke.state._protocol import StateStore

#: Every tool, in the order they are listed.
TOOLS = (
    "list_targets",
    "list_runs",
    "show_run",
    "run_target",
    "resume_run",
    "resume_check",
    "cancel_run",
)
#: What ``--no-run`` removes, and what ``--no-cancel`` removes.
RUN_TOOLS = frozenset({"run_target", "resume_run", "resume_check"})
CANCEL_TOOLS = frozenset({"cancel_run"})

Describe = Callable[["BuildGraph", Sequence["Parameter[Any]"]], dict[str, Any]]


class ToolFailure(ZukeError):
    """A tool call that failed or was refused: its one-line message goes to the client."""


def _stderr(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def one_line(exc: BaseException, redactor: Redactor) -> str:
    """An exception as one line with no secret in it (a ZukeError's text as it is)."""
    text = str(exc) if isinstance(exc, ZukeError) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split()) or type(exc).__name__
    return redactor.text(text)


@dataclass
class BuildTools:
    """The tools of one build, as ``zuke mcp`` serves them."""

    build: type[Build]
    env: Mapping[str, str]
    actor: str
    #: the targets and parameters as ``zuke --list --json`` shows them (the CLI's form)
    describe: Describe
    allow_run: bool = True
    allow_cancel: bool = True
    clock: Clock = SYSTEM_CLOCK
    warn: Callable[[str], None] = _stderr
    store: StateStore | None = None
    #: where ``.zuke/runs`` lives: the build file's directory (None: the working directory)
    home: Path | None = None
    #: where ``actor`` came from: a run started here records it with its starter, so a
    #: GitHub login under Actions stays one (``no_self_approval()`` trusts only those)
    actor_source: ActorSource = "local"
    _redactor: Redactor = field(default_factory=Redactor, init=False)

    def __post_init__(self) -> None:
        from zuke._build import parameters

        self._secret_names = frozenset(p.name for p in parameters(self.build) if p.is_secret)
        # The secrets the environment supplies: never in a result or an event (a bad
        # value there is the run's to report).
        self._redactor.add(*self._accepted_secrets({}))

    def enabled(self) -> list[str]:
        return [name for name in TOOLS if self.allows(name)]

    def allows(self, tool: str) -> bool:
        if tool in RUN_TOOLS:
            return self.allow_run
        return not (tool in CANCEL_TOOLS and not self.allow_cancel)

    def _store(self) -> StateStore:
        if self.store is None:
            from zuke.runs.store import open_store

            self.store = open_store(self.env, build=self.build, cwd=self.home)
        return self.store

    # -- the calls that concern no run -----------------------------------------------

    async def list_targets(self) -> dict[str, Any]:
        from zuke._build import parameters
        from zuke._engine.run import load

        try:
            loaded = load(self.build, {}, self.env, lenient=True)
            return self._redactor.json(self.describe(loaded.graph, parameters(self.build)))  # type: ignore[no-any-return]
        except Exception as exc:
            raise ToolFailure(one_line(exc, self._redactor)) from None

    async def list_runs(
        self,
        status: str | None = None,
        target: str | None = None,
        build: str | None = None,
        since: str | None = None,
        limit: int | None = None,
    ) -> dict[str, Any]:
        """``{"runs": [...]}``, newest first (one JSON object: a list would be split up)."""
        from zuke.runs import list_runs, parse_query

        try:
            query = parse_query(status=status, target=target, since=since, limit=limit, build=build)
            runs = list_runs(self._store(), query)
        except Exception as exc:
            raise ToolFailure(one_line(exc, self._redactor)) from None
        return {"runs": [self._redactor.json(summary_to_json(r)) for r in runs]}

    # -- the calls that concern a run: each one lands on its audit trail ----------------

    async def show_run(self, run_id: str) -> dict[str, Any]:
        from zuke.runs import show_run

        args = {"run_id": run_id}
        return await self._audited(
            "show_run", run_id, args, lambda: show_run(self._store(), run_id)
        )

    async def run_target(
        self,
        targets: Sequence[str],
        params: Mapping[str, str | Sequence[str]] | None = None,
        skip: Sequence[str] = (),
    ) -> dict[str, Any]:
        """Run ``targets`` in this process, recorded; the verdict, outcomes and run id."""
        from zuke.runs.owner import run_owned

        supplied = {k: [v] if isinstance(v, str) else list(v) for k, v in (params or {}).items()}
        redactor = self._with_supplied(supplied)
        args = redacted_args(
            {"targets": list(targets), "params": supplied or None, "skip": list(skip) or None},
            redactor,
            self._secret_names,
        )
        if not self.allow_run:
            raise ToolFailure(_disabled("run_target"))
        if not targets:
            raise ToolFailure("run_target needs at least one target (see list_targets)")
        options = self._run_options(targets=list(targets), params=supplied, skip=list(skip))
        try:  # a signal stored while it ran is consumed now, as every owner does
            result = await run_owned(self.build, options, store=self._store())
        except Exception as exc:
            raise ToolFailure(one_line(exc, redactor)) from None
        payload = result_json(result, redactor)
        if result.recorded:
            outcome: EventOutcome = "error" if result.record_error else "ok"
            self._record("run_target", result.run_id, outcome, args, f"run {result.status}")
        return payload

    async def resume_run(
        self,
        run_id: str,
        signal: str | None = None,
        data: Any = None,
        signal_id: str | None = None,
    ) -> dict[str, Any]:
        """Resume a suspended run in this process, delivering ``signal`` with ``data``."""
        from zuke.runs.resume import ResumeOptions, SignalDelivery, resume_run_async

        args: dict[str, Any] = {"run_id": run_id, "signal": signal, "signal_id": signal_id}
        if data is not None:  # a payload is never echoed back: its size only
            args["data_bytes"] = len(json.dumps(data, default=str).encode())
        if signal is None and (data is not None or signal_id is not None):
            raise ToolFailure("resume_run: data and signal_id go with a signal name")

        async def resume() -> dict[str, Any]:
            delivery = None if signal is None else SignalDelivery(signal, data, signal_id)
            options = ResumeOptions(signal=delivery, actor=self.actor)
            outcome = await resume_run_async(
                self.build, self._store(), run_id, options, self._run_options()
            )
            for note in outcome.notes:
                self.warn(self._redactor.text(f"zuke mcp: {note}"))
            return {
                "runId": outcome.run_id,
                "action": outcome.action,
                "status": outcome.status,
                "ok": outcome.ok,
                "notes": list(outcome.notes),
                "result": None if outcome.result is None else result_json(outcome.result),
            }

        return await self._audited_async("resume_run", run_id, args, resume)

    async def resume_check(self, run_id: str | None = None) -> dict[str, Any]:
        """One sweep over this build's suspended runs (or one run): its JSON summary."""
        from zuke.runs.resume import ResumeOptions
        from zuke.runs.sweep import resume_check_async

        async def sweep() -> dict[str, Any]:
            report = await resume_check_async(
                self.build,
                self._store(),
                run_id=run_id,
                resume=ResumeOptions(actor=self.actor),
                run=self._run_options(),
            )
            return report.as_json()

        if run_id is None:
            if not self.allow_run:
                raise ToolFailure(_disabled("resume_check"))
            try:
                return self._redactor.json(await sweep())  # type: ignore[no-any-return]
            except Exception as exc:
                raise ToolFailure(one_line(exc, self._redactor)) from None
        return await self._audited_async("resume_check", run_id, {"run_id": run_id}, sweep)

    async def cancel_run(self, run_id: str, wait: str = "1m") -> dict[str, Any]:
        """Cancel a run (:func:`zuke.runs.cancel.cancel_run`); ``wait``: for a live owner."""
        from zuke._provenance import build_origin
        from zuke.runs import cancel_run

        async def cancel() -> dict[str, Any]:
            wait_ms = parse_duration(wait, what="wait", allow_zero=True)
            result = await asyncio.to_thread(
                cancel_run,
                self._store(),
                run_id,
                actor=self.actor,
                origin=build_origin(self.env),
                build_name=self.build.__name__,
                clock=self.clock,
                wait_ms=wait_ms,
                build=self.build,  # a run nobody owns is settled here: its compensations too
                env=self.env,  # the secrets they need
            )
            return {
                "runId": result.run_id,
                "status": result.status,
                "noop": result.noop,
                "owner": result.owner,
                "released": list(result.released),
                "left": list(result.left),
                "warnings": list(result.warnings),
                "compensated": list(result.compensated),
                "failures": list(result.failures),
                "notes": list(result.notes),
                "summary": result.summary(),
            }

        args = {"run_id": run_id, "wait": wait}
        return await self._audited_async("cancel_run", run_id, args, cancel)

    # -- plumbing ------------------------------------------------------------------------

    async def _audited(
        self, tool: str, run_id: str, args: Mapping[str, Any], call: Callable[[], Any]
    ) -> dict[str, Any]:
        async def run() -> dict[str, Any]:
            return shown_record_json(call())  # never a claim's token

        return await self._audited_async(tool, run_id, args, run)

    async def _audited_async(
        self,
        tool: str,
        run_id: str,
        args: Mapping[str, Any],
        call: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Check the id, refuse a disabled tool, run ``call``; the outcome goes on the trail."""
        try:
            check_id(run_id)
        except ZukeError as exc:
            raise ToolFailure(one_line(exc, self._redactor)) from None
        text_args = redacted_args(args, self._redactor, self._secret_names)
        if not self.allows(tool):
            message = _disabled(tool)
            self._record(tool, run_id, "denied", text_args, message)
            raise ToolFailure(message)
        try:
            payload = await call()
        except Exception as exc:
            message = one_line(exc, self._redactor)
            self._record(tool, run_id, "error", text_args, message)
            raise ToolFailure(message) from None
        self._record(tool, run_id, "ok", text_args, None)
        return self._redactor.json(payload)  # type: ignore[no-any-return]

    def _record(
        self,
        tool: str,
        run_id: str,
        outcome: EventOutcome,
        args: Mapping[str, str],
        detail: str | None,
    ) -> None:
        if self._store().get_run(run_id) is None:
            return  # no run, no trail (the call's error says so)
        record_call(
            self._store(),
            run_id,
            tool=tool,
            actor=self.actor,
            outcome=outcome,
            args=args,
            detail=detail,
            clock=self.clock,
            warn=self.warn,
        )

    def _with_supplied(self, supplied: Mapping[str, Sequence[str]]) -> Redactor:
        """This server's redactor plus the secret values a call supplies that are accepted.

        A refused value (too short, or not of its parameter's kind) is the run's to
        report and is masked nowhere: masking a short one garbles every later result,
        JSON keys included, and by doing so reveals it.
        """
        self._redactor.add(*self._accepted_secrets(supplied))  # later calls never echo them
        return self._redactor

    def _accepted_secrets(self, supplied: Mapping[str, Sequence[str]]) -> list[str]:
        """Every form the run masks (numbers' spellings, array elements) of each secret
        parameter whose value, from ``supplied`` or the environment, resolves."""
        from zuke._build import parameters
        from zuke._params import resolve

        found: list[str] = []
        for param in parameters(self.build):
            if not param.is_secret:
                continue
            resolution = resolve([param], supplied, self.env, lenient=True)
            if not resolution.errors:
                found += resolution.secrets
        return found

    def _run_options(self, **overrides: Any) -> RunOptions:
        from zuke._engine.run import RunOptions

        base: dict[str, Any] = {
            "env": self.env,
            "actor": Actor(self.actor, self.actor_source),
            "clock": self.clock,
            "on_warning": self._warn_redacted,
            "on_interrupt": self._warn_redacted,
            "state": True,  # a run started here always has a record (and an id to return)
            "cwd": self.home,
        }
        return RunOptions(**(base | overrides))

    def _warn_redacted(self, message: str) -> None:
        self.warn(self._redactor.text(message))


def _disabled(tool: str) -> str:
    flag = "--no-cancel" if tool in CANCEL_TOOLS else "--no-run"
    return f"{tool} is disabled: this server was started with zuke mcp {flag}"


def result_json(result: RunResult, redactor: Redactor | None = None) -> dict[str, Any]:
    """A run's verdict, per-target outcomes and gates, as a tool returns it."""
    payload = {
        "runId": result.run_id,
        "status": result.status,
        "ok": result.ok,
        "recorded": result.recorded,
        "durationMs": round(result.duration_ms, 1),
        "outcomes": {
            name: {"status": o.status, "error": o.error, "durationMs": o.duration_ms}
            for name, o in result.outcomes.items()
        },
        "waiting": {
            name: {"trigger": w.trigger, "deadline": w.deadline, "onTimeout": w.on_timeout}
            for name, w in result.waiting.items()
        },
        "stopReason": result.stop_reason,
        "recordError": result.record_error,
    }
    return payload if redactor is None else redactor.json(payload)
