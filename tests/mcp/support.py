"""A build for the ``zuke mcp`` tests: a secret, a gate that suspends, a failing target."""

from __future__ import annotations

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
