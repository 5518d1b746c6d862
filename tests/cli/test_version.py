"""Issue 28 §5: ``zuke --version`` (it was "Unknown flag"), the version in ``zuke --help``'s
header and in the MCP server's info; cheap: no build, no engine."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest

from tests.conftest import CliRunner
from tests.e2e.support import ZUKE, clean_env, write_build
from zuke._version import __version__

ROOT = Path(__file__).resolve().parents[2]


def test_the_version_is_the_packages() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == declared == version("zuke")
    import zuke

    assert zuke.__version__ == __version__


def test_zuke_version_prints_it_and_exits_0_without_a_build(tmp_path: Path, cli: CliRunner) -> None:
    result = cli("--version")
    assert (result.code, result.out, result.err) == (0, f"zuke {__version__}\n", "")
    (tmp_path / "build.py").write_text("this is not python")  # never loaded for it
    assert cli("--version").out == f"zuke {__version__}\n"
    assert cli("--version", "--help").out.startswith("Usage: zuke")  # help wins, as anywhere
    assert cli("--", "--version").code == 2  # after --: a target's name


def test_the_help_header_carries_the_version(cli: CliRunner) -> None:
    result = cli("--help")
    assert f"\n  zuke {__version__}: run the targets of the build" in result.out
    assert "  --version           print zuke's version\n" in result.out


PROBE = """
import io, json, sys
from zuke.cli import main
out = io.StringIO()
code = main(["--version"], out=out, err=io.StringIO())
print(json.dumps([code, out.getvalue(), sorted(sys.modules)]))
"""


def test_zuke_version_loads_no_engine_and_no_build(tmp_path: Path) -> None:
    write_build(tmp_path, "raise SystemExit('the build must not be imported')\n")
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, capture_output=True,
                          text=True, check=True, env=clean_env())  # fmt: skip
    code, out, modules = json.loads(done.stdout.splitlines()[-1])
    assert (code, out) == (0, f"zuke {__version__}\n")
    heavy = [m for m in modules if m.startswith("zuke._engine") or m in ("asyncio", "click")]
    assert heavy == [] and "zuke._loader" not in modules


@pytest.mark.e2e
def test_the_mcp_server_says_zukes_version_in_its_info(tmp_path: Path) -> None:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    write_build(tmp_path, "from zuke import Build, target\nclass App(Build):\n    pass\n")
    server = StdioServerParameters(command=ZUKE, args=["mcp"], cwd=str(tmp_path), env=clean_env())

    async def info() -> tuple[str, str]:
        with (tmp_path / "server.err").open("a") as errlog:
            async with (
                stdio_client(server, errlog=errlog) as (read, write),
                ClientSession(read, write) as client,
            ):
                answer = await client.initialize()
                return answer.server_info.name, answer.server_info.version

    assert asyncio.run(info()) == ("zuke", __version__)
