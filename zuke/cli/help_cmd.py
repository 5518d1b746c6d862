"""``--help`` anywhere: print the help of the command named, and do nothing else.

:func:`zuke.cli.main` asks :func:`zuke.cli.args.help_requested` before it
dispatches, for every command alike, and comes here when the answer is yes.
Nothing here parses the rest of the command line for action, opens a store,
or runs a build: a build is loaded only to list its targets and parameters
(as ``zuke --help`` always did), and a problem loading it is a note in the
help, not an error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from zuke._errors import UsageError, ZukeError
from zuke.cli import args as cli_args

if TYPE_CHECKING:
    from zuke._build import Build


GRAPH_HELP = """\
Usage: zuke graph [--format text|mermaid|dot|json] [OPTIONS]

  The build's declared dependency graph (depends_on edges; no parameters needed).
  In text an arrow points from a target to what it depends on; in mermaid and dot
  from a dependency to its dependent. See docs/cli.md.

Options:
  --format FORMAT  text (default), mermaid, dot or json
  -f, --file PATH  the build file (default build.py, or ZUKE_FILE)
  -h, --help       show this help
"""

LIST_HELP = """\
Usage: zuke --list [--json] [OPTIONS]

  The build's targets (descriptions, dependencies) and parameters (flag,
  environment variable, kind, required, default, secret). No parameters needed.

Options:
  -l, --list       list targets and parameters
  --json           as JSON, for tools (docs/cli.md has its fields)
  -f, --file PATH  the build file (default build.py, or ZUKE_FILE)
  -h, --help       show this help
"""


def show_help(
    argv: Sequence[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
) -> int:
    """Print the help ``argv`` asks for (``argv`` has the command first); exit code 0."""
    command = argv[0] if argv else None
    if command == "resume":
        from zuke.cli.resume_cmd import USAGE as resume_usage

        out.write(resume_usage)
    elif command == "mcp":
        from zuke.cli.mcp_cmd import USAGE as mcp_usage

        out.write(mcp_usage)
    elif command == "serve":
        out.write(serve_help())
    elif command in cli_args.MANAGEMENT_COMMANDS:
        from zuke.cli.manage import command_help

        out.write(command_help(argv))
    elif cli_args.command_word(argv) == "graph":
        out.write(GRAPH_HELP)
    elif cli_args.lists(argv):
        out.write(LIST_HELP)
    else:
        out.write(_build_help(argv, build, env) + "\n")
    out.flush()
    return 0


def serve_help() -> str:
    """``zuke serve --help`` in the style of every other zuke help (its parser is argparse)."""
    import argparse
    import textwrap

    from zuke._serve.__main__ import _parser

    parser = _parser()
    rows: list[tuple[str, str]] = []
    for action in parser._actions:  # argparse has no public walk of its options
        if isinstance(action, argparse._HelpAction):
            continue  # last, in the words of every zuke help
        flags = ", ".join(action.option_strings)
        if action.nargs != 0:  # a number is N, as in `zuke runs list --limit N`
            flags += f" {action.metavar or ('N' if action.type is int else action.dest.upper())}"
        rows.append((flags, action.help or ""))
    rows.append(("-h, --help", "show this help"))
    width = min(max(len(flag) for flag, _ in rows), 26) + 2
    lines = ["Usage: zuke serve [OPTIONS]", ""]
    lines += textwrap.wrap(parser.description or "", 78, initial_indent="  ",
                           subsequent_indent="  ")  # fmt: skip
    lines += ["", "Options:"]
    for flag, text in rows:
        wrapped = textwrap.wrap(text, 78 - width - 2) or [""]
        if len(flag) + 2 > width:  # a long flag: its text starts on the next line
            lines.append(f"  {flag}")
            wrapped_first = wrapped
        else:
            lines.append(f"  {flag.ljust(width)}{wrapped[0]}")
            wrapped_first = wrapped[1:]
        lines += [" " * (width + 2) + more for more in wrapped_first]
    return "\n".join(lines) + "\n"


def _build_help(argv: Sequence[str], build: type[Build] | None, env: Mapping[str, str]) -> str:
    """The usage with this build's targets and parameters; a build that cannot load, a note."""
    from zuke._build import parameters
    from zuke._engine.loading import load  # no asyncio, no scheduler
    from zuke._loader import find_build_file, load_build_class
    from zuke.cli import listing

    file, _ = cli_args.prescan(argv)
    try:
        if build is None:
            build = load_build_class(find_build_file(file, env))
        params = parameters(build)
        try:  # only for the redactor: a default may quote a secret given on this line
            supplied = cli_args.parse(cli_args.without_help(argv), params).params
        except UsageError:
            supplied = {}
        loaded = load(build, supplied, env, lenient=True)
    except ZukeError as exc:
        return listing.help_text(None, [], note=f"({exc})")
    return loaded.redactor.text(listing.help_text(loaded.graph, params))
