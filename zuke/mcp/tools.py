"""What each ``zuke mcp`` tool does, over the library, with no MCP SDK in sight.

:class:`BuildTools` is the seven tools; what every call shares — the build, its environment
and store, the server's actor, which tools are enabled, refusals, secrets masked, the run's
audit trail — is :class:`~zuke.mcp._calls.ToolCalls`, and the JSON each returns
:mod:`zuke.mcp.results`'s. Each tool returns a JSON value or raises :class:`ToolFailure` with
one line for the client. Nothing here writes to stdout: in ``zuke mcp`` stdout is the MCP
channel, so runs have no console observer and warnings go to ``warn`` (stderr).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from zuke._duration import parse_duration
from zuke.mcp._calls import (
    CANCEL_TOOLS,
    RUN_TOOLS,
    TOOLS,
    ToolCalls,
    ToolFailure,
    disabled,
    one_line,
)
from zuke.mcp.audit import redacted_args
from zuke.mcp.results import cancel_json, result_json, resume_json
from zuke.state.records import EventOutcome
from zuke.state.wire import summary_to_json

__all__ = ["CANCEL_TOOLS", "RUN_TOOLS", "TOOLS", "BuildTools", "ToolFailure", "result_json"]


class BuildTools(ToolCalls):
    """The tools of one build, as ``zuke mcp`` serves them."""

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
            raise ToolFailure(disabled("run_target"))
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
            return resume_json(outcome)

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
                raise ToolFailure(disabled("resume_check"))
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
            return cancel_json(result)

        args = {"run_id": run_id, "wait": wait}
        return await self._audited_async("cancel_run", run_id, args, cancel)
