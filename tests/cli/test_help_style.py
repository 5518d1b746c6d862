"""Issue 19 §3 item 7: one help style everywhere (``zuke --help``, each command's, ``python
build.py --help``), the whole command set with the environment and the exit codes, real
metavars, and ``--help`` after every command only prints help — with a broken build too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke._engine.children import EXIT_UNRENEWED
from zuke.cli.manage import app

BUILD = """
    from zuke import Build, target

    class App(Build):
        @target
        def hello(self, t):
            return t.executes(lambda: open("RAN", "w").close())

    if __name__ == "__main__":
        import zuke
        zuke.run(App)
"""
BROKEN = "from zuke import Build\n\nclass App(Build)\n    pass\n"

COMMANDS = [
    (), ("hello",), ("graph",), ("--list",), ("runs",), ("runs", "list"), ("runs", "show"),
    ("runs", "prune"), ("resume",), ("resume", "--check"), ("cancel",), ("locks",),
    ("locks", "list"), ("locks", "break"), ("state",), ("state", "init"), ("mcp",), ("serve",),
]  # fmt: skip


def _tree(
    command: click.Command, path: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], click.Command]]:
    found = [(path, command)]
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            found += _tree(sub, (*path, name))
    return found


@pytest.mark.parametrize("source", [BUILD, BROKEN], ids=["build", "broken-build"])
@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: " ".join(a) or "zuke")
def test_help_after_every_command_only_prints_help_in_one_style(
    write_build: BuildWriter, cli: CliRunner, tmp_path: Path, source: str, argv: tuple[str, ...]
) -> None:
    write_build(source)
    for flag in ("--help", "-h"):
        result = cli(*argv, flag)
        assert result.code == 0 and result.err == "", result.text
        lines = result.out.splitlines()
        assert lines[0].startswith("Usage: zuke"), lines[0]
        assert lines[1].startswith(("", "       zuke", " " * 11))  # the usage's own lines
        assert "Options:" in lines
        [helpline] = [line for line in lines if line.strip().startswith("-h, --help")]
        assert helpline.split() == ["-h,", "--help", "show", "this", "help"]
    # nothing ran or written (Python's own bytecode cache of the imported build file aside)
    written = sorted(p.name for p in tmp_path.iterdir() if p.name != "__pycache__")
    assert written == ["build.py"]


def test_zuke_help_lists_every_command_the_environment_and_the_exit_codes(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(BUILD)
    text = cli("--help").out
    for synopsis in (
        "resume --check [RUN_ID] [--json] [--watch [--every DURATION]]",
        "resume RUN_ID [--signal NAME [--data JSON] [--signal-id ID]]",
        "mcp [--no-run] [--no-cancel] [--actor NAME]",
        "serve [--host HOST] [--port PORT] [--db FILE|URL] [--no-auth]",
        "cancel RUN_ID [--actor NAME] [--wait DURATION] [--no-compensations]",
        "state init [--force]",
    ):
        assert synopsis in text
    for variable in ("ZUKE_STATE ", "ZUKE_STATE_URL", "ZUKE_STATE_TOKEN", "ZUKE_STATE_DIR",
                     "ZUKE_FILE", "ZUKE_ACTOR", "ZUKE_RUN_LEASE_TTL", "NO_COLOR"):  # fmt: skip
        assert f"\n  {variable}" in text or f" {variable}" in text, variable
    codes = text[text.index("Exit codes:") :].splitlines()[1:6]
    assert [line.split()[0] for line in codes] == ["0", "1", "2", str(EXIT_UNRENEWED), "130"]
    assert "could not be renewed" in codes[3]
    assert "Targets:" in text and "hello" in text


def test_every_option_that_takes_a_value_names_it() -> None:
    """``--limit N``, not click's default ``--limit TEXT``."""
    for path, command in _tree(app):
        ctx = click.Context(command, info_name=" ".join(path) or "zuke")
        for param in command.get_params(ctx):
            if isinstance(param, click.Option) and not param.is_flag and not param.hidden:
                assert param.metavar is not None, (path, param.name)
    ctx = click.Context(app.commands["runs"].commands["list"], info_name="list")  # type: ignore[attr-defined]
    assert "--limit N " in ctx.get_help()


def test_a_context_without_zukes_settings_leaves_h_working(cli: CliRunner) -> None:
    """click builds a command's help option once, from the first context that asks: a tool
    walking the tree with plain contexts (as above) must not take ``-h`` away afterwards."""
    for path, command in _tree(app):
        command.get_params(click.Context(command, info_name=" ".join(path) or "zuke"))
    for argv in (["runs", "list", "-h"], ["runs", "-h"], ["state", "init", "-h"]):
        result = cli(*argv)
        assert result.code == 0 and result.err == "", (argv, result.text)
        assert "  -h, --help" in result.out and "show this help" in result.out, argv


def test_python_build_py_help_is_zuke_help(tmp_path: Path, write_build: BuildWriter) -> None:
    write_build(BUILD)
    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo}
    direct = subprocess.run([sys.executable, "build.py", "--help"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, check=False)  # fmt: skip
    via = subprocess.run([sys.executable, "-m", "zuke", "--help"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert direct.returncode == via.returncode == 0
    assert direct.stdout == via.stdout and direct.stdout.startswith("Usage: zuke")
    assert not (tmp_path / "RAN").exists()
