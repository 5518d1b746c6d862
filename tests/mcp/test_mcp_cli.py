"""``zuke mcp`` at the command line: help, bad options, a missing SDK, the reserved name."""

from __future__ import annotations

import sys

import pytest

from tests.conftest import BuildWriter, CliRunner


def test_mcp_help_names_the_flags_and_needs_no_build(cli: CliRunner) -> None:
    result = cli("mcp", "--help")
    assert result.code == 0
    assert "Usage: zuke mcp [--no-run] [--no-cancel]" in result.out
    assert "--no-cancel      no cancel_run" in result.out


def test_an_unknown_mcp_option_is_one_usage_line(cli: CliRunner) -> None:
    result = cli("mcp", "--no-runs")
    assert result.code == 2
    assert result.err == "zuke: zuke mcp: unknown option '--no-runs'; see zuke mcp --help\n"


def test_mcp_without_the_sdk_installed_says_how_to_install_it(
    cli: CliRunner, write_build: BuildWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_build(
        "from zuke import Build, target\n"
        "class B(Build):\n"
        "    @target\n"
        "    def a(self, t):\n"
        "        return t.executes(lambda: None)\n"
    )
    for name in [m for m in sys.modules if m.split(".")[0] in ("mcp", "mcp_types")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "mcp", None)  # `import mcp` fails as if not installed
    monkeypatch.delitem(sys.modules, "zuke.mcp.server", raising=False)
    result = cli("mcp")
    assert result.code == 2
    assert result.err == "zuke: zuke mcp needs the MCP SDK: pip install 'zuke[mcp]'\n"
    assert result.out == ""


def test_a_target_may_not_be_named_mcp(cli: CliRunner, write_build: BuildWriter) -> None:
    write_build(
        "from zuke import Build, target\n"
        "class B(Build):\n"
        "    @target\n"
        "    def mcp(self, t):\n"
        "        return t.executes(lambda: None)\n"
    )
    result = cli("--list")
    assert result.code == 2 and "mcp" in result.err and result.err.count("\n") == 1
