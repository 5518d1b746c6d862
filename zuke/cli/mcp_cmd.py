"""``zuke mcp [--no-run] [--no-cancel]``: serve the build over the Model Context Protocol.

Parsed here by hand (three flags and ``--file``/``--actor``); the server is
:mod:`zuke.mcp`. The SDK is an optional extra: without it the command is one
``zuke:`` line naming the install, exit 2. The build's targets and parameters
are described with :mod:`zuke.cli.listing`, the form ``zuke --list --json`` prints.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from zuke._errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from zuke._build import Build
    from zuke._engine.plan import BuildGraph
    from zuke._params import Parameter

USAGE = """\
Usage: zuke mcp [--no-run] [--no-cancel] [--file PATH] [--actor NAME]

  Serve this build over the Model Context Protocol on stdin/stdout (docs/mcp.md).

Options:
  --no-run         no run_target, resume_run or resume_check: read and cancel only
  --no-cancel      no cancel_run
  -f, --file PATH  the build file (default build.py, or ZUKE_FILE)
  --actor NAME     who the calls are recorded as (default ZUKE_ACTOR; under GitHub Actions
                   GITHUB_TRIGGERING_ACTOR, GITHUB_ACTOR; else the login)
  -h, --help       show this help
"""
NO_SDK = "zuke mcp needs the MCP SDK: pip install 'zuke[mcp]'"


def parse(argv: Sequence[str]) -> dict[str, Any]:
    """The options of ``zuke mcp`` (``argv`` without the command itself)."""
    opts: dict[str, Any] = {"run": True, "cancel": True, "file": None, "actor": None, "help": False}
    it = iter(argv)
    for token in it:
        flag, has_value, inline = token.partition("=")
        if flag in ("--no-run", "--no-cancel", "--help", "-h") and not has_value:
            key = {"--no-run": "run", "--no-cancel": "cancel"}.get(flag, "help")
            opts[key] = key == "help"
        elif flag in ("--file", "-f", "--actor"):
            value = inline if has_value else next(it, None)
            if not value:
                raise UsageError(f"{flag} needs a value")
            opts["actor" if flag == "--actor" else "file"] = value
        else:
            raise UsageError(f"zuke mcp: unknown option {token!r}; see zuke mcp --help")
    return opts


def describe(graph: BuildGraph, params: Sequence[Parameter[Any]]) -> dict[str, Any]:
    from zuke.cli import listing

    return {
        "targets": listing.describe_targets(graph),
        "parameters": listing.describe_parameters(params),
    }


def run_mcp(
    argv: Sequence[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
    home: Path | None = None,
) -> int:
    """``zuke mcp ...``; returns the exit code when the client closes the channel (``home``:
    the build file's directory, where ``.zuke/runs`` lives)."""
    opts = parse(argv[1:])
    if opts["help"]:
        out.write(USAGE)
        return 0
    try:
        from zuke.mcp.server import serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("mcp", "mcp_types"):
            raise UsageError(NO_SDK) from None
        raise
    from zuke._loader import build_home, find_build_file, load_build_class
    from zuke._provenance import resolve
    from zuke.mcp.tools import BuildTools

    if build is None:
        build = load_build_class(find_build_file(opts["file"], env))
    if home is None or opts["file"] is not None:
        home = build_home(opts["file"], env)
    who = resolve(opts["actor"], env)
    tools = BuildTools(
        build=build,
        env=env,
        actor=who.name,
        actor_source=who.source,
        describe=describe,
        allow_run=opts["run"],
        allow_cancel=opts["cancel"],
        home=home,
    )
    asyncio.run(serve_stdio(tools))
    return 0
