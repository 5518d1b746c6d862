"""The ``zuke mcp`` server: :class:`~zuke.mcp.tools.BuildTools` on the official ``mcp`` SDK, stdio.

The SDK's :class:`~mcp.server.mcpserver.MCPServer` does the protocol; each
tool here is a thin async function that calls the matching
:class:`~zuke.mcp.tools.BuildTools` method and turns a
:class:`~zuke.mcp.tools.ToolFailure` into the SDK's ``ToolError`` (an MCP
tool error with one message, no traceback). Every tool is registered; the
ones ``--no-run`` / ``--no-cancel`` disable are left out of ``tools/list``
and, called anyway, refused by :class:`BuildTools` (and audited as denied).

The SDK's stdio transport moves file descriptor 1 aside for the protocol and
points it at stderr, so a subprocess's output cannot corrupt the channel;
:func:`_stdout_to_stderr` does the same for Python's ``sys.stdout`` (a body's
``print``), whose buffer would otherwise reach the wire when the transport
gives fd 1 back at exit.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import Tool
from pydantic import Field

from zuke._text import has_lone_surrogate
from zuke._version import __version__
from zuke.mcp.tools import BuildTools, ToolFailure

INSTRUCTIONS = (
    "Tools over one zuke build: list its targets and runs, show a run, run targets "
    "(a gate suspends the run), resume a suspended run with a signal, sweep suspended "
    "runs, cancel a run. Each call about a run is added to that run's audit trail."
)

RunId = Annotated[str, Field(description="the run's id (from run_target or list_runs)")]


@asynccontextmanager
async def _stdout_to_stderr(server: MCPServer) -> AsyncIterator[None]:
    """While serving (the transport holds the wire), ``print`` goes to stderr."""
    saved = sys.stdout
    saved.flush()
    sys.stdout = sys.stderr
    try:
        yield
    finally:
        sys.stdout = saved


class _BuildServer(MCPServer):
    """Lists only the tools this server's flags enable."""

    def __init__(self, tools: BuildTools) -> None:
        super().__init__(
            name="zuke",
            version=__version__,  # the serverInfo a client sees: zuke's, not the SDK's
            instructions=INSTRUCTIONS,
            log_level="WARNING",
            lifespan=_stdout_to_stderr,
        )
        self.zuke_tools = tools

    async def list_tools(self) -> list[Tool]:
        enabled = set(self.zuke_tools.enabled())
        return [t for t in await super().list_tools() if t.name in enabled]

    async def call_tool(self, name: str, arguments: dict[str, Any], *rest: Any) -> Any:
        if has_lone_surrogate(arguments):  # before any tool sees them: nothing is stored
            raise ToolError(f"{name}: an argument holds a lone surrogate, which is not text")
        return await super().call_tool(name, arguments, *rest)


async def _call(result: Awaitable[Any]) -> Any:
    try:
        return await result
    except ToolFailure as exc:
        raise ToolError(str(exc)) from None


def build_server(tools: BuildTools) -> MCPServer:
    """An MCP server whose tools are ``tools``' methods."""
    server = _BuildServer(tools)

    @server.tool()
    async def list_targets() -> dict[str, Any]:
        """The build's targets (name, description, dependencies) and parameters (no values)."""
        return await _call(tools.list_targets())  # type: ignore[no-any-return]

    @server.tool()
    async def list_runs(
        status: Annotated[str | None, Field(description="only runs with this status")] = None,
        target: Annotated[str | None, Field(description="only runs that plan this target")] = None,
        build: Annotated[str | None, Field(description="only runs of this build class")] = None,
        since: Annotated[str | None, Field(description="only runs created at/after (ISO)")] = None,
        limit: Annotated[int | None, Field(description="at most this many runs", ge=1)] = None,
    ) -> dict[str, Any]:
        """Recorded runs as {"runs": [...]}, newest first (id, build, status, target, actor)."""
        return await _call(tools.list_runs(status, target, build, since, limit))  # type: ignore[no-any-return]

    @server.tool()
    async def show_run(run_id: RunId) -> dict[str, Any]:
        """One run's record: status, targets, signals, audit trail (never a secret)."""
        return await _call(tools.show_run(run_id))  # type: ignore[no-any-return]

    @server.tool()
    async def run_target(
        targets: Annotated[list[str], Field(description="the targets to run", min_length=1)],
        params: Annotated[
            dict[str, str | list[str]] | None,
            Field(description="parameter values by name (a list for an array parameter)"),
        ] = None,
        skip: Annotated[list[str] | None, Field(description="targets to treat as done")] = None,
    ) -> dict[str, Any]:
        """Run targets in the server's process, recorded; a gate suspends the run.

        Returns the verdict (succeeded, failed, cancelled, suspended), each target's
        outcome, the gates a suspended run waits on, and the run id.
        """
        return await _call(tools.run_target(targets, params, skip or ()))  # type: ignore[no-any-return]

    @server.tool()
    async def resume_run(
        run_id: RunId,
        signal: Annotated[str | None, Field(description="a signal to deliver")] = None,
        data: Annotated[Any, Field(description="the signal's JSON payload (<= 64 KiB)")] = None,
        signal_id: Annotated[
            str | None, Field(description="idempotency key; a repeat is a no-op")
        ] = None,
    ) -> dict[str, Any]:
        """Resume a suspended run (exactly once), optionally delivering a signal."""
        return await _call(tools.resume_run(run_id, signal, data, signal_id))  # type: ignore[no-any-return]

    @server.tool()
    async def resume_check(
        run_id: Annotated[str | None, Field(description="sweep only this run")] = None,
    ) -> dict[str, Any]:
        """Sweep suspended runs: resume satisfied gates, settle timeouts, reap dead owners."""
        return await _call(tools.resume_check(run_id))  # type: ignore[no-any-return]

    @server.tool()
    async def cancel_run(
        run_id: RunId,
        wait: Annotated[
            str, Field(description="how long to wait for a live owner to stop it (e.g. 30s)")
        ] = "1m",
    ) -> dict[str, Any]:
        """Cancel a run: a live owner is asked to stop; a run nobody owns is settled here,
        its compensations (on_cancel) run in this server."""
        return await _call(tools.cancel_run(run_id, wait))  # type: ignore[no-any-return]

    return server


async def serve_stdio(tools: BuildTools) -> None:
    """Serve ``tools`` on stdin/stdout until the client closes the channel."""
    await build_server(tools).run_stdio_async()
