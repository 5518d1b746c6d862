"""Builds for the ``zuke mcp`` tests (a secret, a gate that suspends, a failing target, a
compensation) and the helpers that call the tools in-process."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

from zuke._build import Build
from zuke._loader import load_build_class
from zuke.cli.mcp_cmd import describe
from zuke.mcp.tools import BuildTools
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunEvent

BUILD = """
import asyncio
import pathlib
from zuke import Build, external_signal, parameter, target

class Release(Build):
    token = parameter("the deploy token").secret()
    version = parameter("the release version").default("1.0")
    markers = parameter("a directory for marker files").default("")

    @target
    def deploy(self, t):
        return t.description("Deploy the release.").executes(self._deploy)

    def _deploy(self, ctx):
        print(f"deploying {self.version.value}")  # stdout: must not reach the MCP channel

    @target
    def approve(self, t):
        return t.description("Wait for QA.").depends_on(self.deploy).waits_for(
            lambda s: s.on(external_signal("approved")).timeout("1h")
        )

    @target
    def promote(self, t):
        return t.depends_on(self.approve).executes(lambda ctx: None)

    @target
    def broken(self, t):
        return t.executes(self._broken)

    def _broken(self, ctx):
        raise RuntimeError(f"refused token {self.token.value}")

    @target
    def slow(self, t):
        return t.executes(self._slow)

    async def _slow(self, ctx):
        (pathlib.Path(self.markers.value) / "started").write_text(ctx.run_id)
        await asyncio.sleep(3600)
"""
SECRET = "s3cr3t-tok3n-value"

#: A deploy whose compensation (``rollback``) needs the secret: a cancel without the
#: build, or without the environment that supplies the secret, cannot run it.
COMPENSATED_BUILD = """
import pathlib
from zuke import Build, external_signal, parameter, target

class Release(Build):
    token = parameter("the deploy token").secret().required()
    markers = parameter("a directory for marker files").required()

    @target
    def deploy(self, t):
        return t.executes(lambda ctx: ctx.state.set({"slot": "sit-7"})).on_cancel(self.rollback)

    @target
    def approve(self, t):
        return t.depends_on(self.deploy).waits_for(
            lambda s: s.on(external_signal("approved")).timeout("1h")
        )

    @target
    def rollback(self, t):
        return t.executes(self._rollback)

    def _rollback(self, ctx):
        assert self.token.value  # the secret came from the server's environment
        (pathlib.Path(self.markers.value) / "rolled-back").write_text(ctx.state.get()["slot"])
"""

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def build_from(tmp_path: Path, source: str) -> type[Build]:
    path = tmp_path / "build.py"
    path.write_text(textwrap.dedent(source))
    return load_build_class(path)


def tools_for(build: type[Build], tmp_path: Path, **flags: Any) -> BuildTools:
    env = {"ZUKE_STATE_DIR": str(tmp_path / "state"), "TOKEN": SECRET}
    warnings: list[str] = []
    tools = BuildTools(build=build, env=env, actor="agent", describe=describe, **flags)
    tools.warn = warnings.append
    return tools


def store_of(tmp_path: Path) -> FileSystemStateStore:
    return FileSystemStateStore(tmp_path / "state")


def events(tmp_path: Path, run_id: str) -> list[RunEvent]:
    found = store_of(tmp_path).get_run(run_id)
    assert found is not None
    return [e for e in found.record.events if e.tool.startswith("mcp:")]


def all_state_bytes(tmp_path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (tmp_path / "state").rglob("*") if p.is_file())
