"""What every ``zuke mcp`` tool call shares: the server's settings, refusals, the audit trail.

Apart from the tools themselves (:mod:`zuke.mcp.tools`) so each tool reads as what it does:
:class:`ToolCalls` holds the build, its environment and store, the server's actor and which
tools are enabled; it refuses a disabled tool, turns a failure into :class:`ToolFailure`'s
one line with no secret in it, masks every secret a call supplies (or the environment does)
in what it returns, and appends each call that concerns a run to that run's audit trail
(:mod:`zuke.mcp.audit`), denied and failed calls too.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import ZukeError
from zuke._provenance import Actor, ActorSource
from zuke._redact import Redactor
from zuke.mcp.audit import record_call, redacted_args
from zuke.state._ids import check_id
from zuke.state.records import EventOutcome
from zuke.state.wire import shown_record_json

if TYPE_CHECKING:
    from pathlib import Path

    from zuke._build import Build
    from zuke._engine.plan import BuildGraph
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


def disabled(tool: str) -> str:
    flag = "--no-cancel" if tool in CANCEL_TOOLS else "--no-run"
    return f"{tool} is disabled: this server was started with zuke mcp {flag}"


@dataclass
class ToolCalls:
    """The settings of one build's tools and what every call does around its work."""

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
            message = disabled(tool)
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
