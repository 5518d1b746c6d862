"""``--help`` anywhere: print the help of the command named, and do nothing else.

:func:`zuke.cli.main` asks :func:`zuke.cli.args.help_requested` before it
dispatches, for every command alike, and comes here when the answer is yes.
Nothing here parses the rest of the command line for action, opens a store,
or runs a build: a build is loaded only to list its targets and parameters
(as ``zuke --help`` always did), and a problem loading it is a note in the
help, not an error.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from zuke._errors import UsageError, ZukeError
from zuke.cli import args as cli_args

if TYPE_CHECKING:
    from zuke._build import Build


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
        from zuke._serve.__main__ import main as serve_main

        with contextlib.redirect_stdout(out):  # argparse prints its help, then stops
            serve_main(["--help"])
    elif command in cli_args.MANAGEMENT_COMMANDS:
        from zuke.cli.manage import command_help

        out.write(command_help(argv))
    else:
        out.write(_build_help(argv, build, env) + "\n")
    out.flush()
    return 0


def _build_help(argv: Sequence[str], build: type[Build] | None, env: Mapping[str, str]) -> str:
    """The usage with this build's targets and parameters; a build that cannot load, a note."""
    from zuke._build import parameters
    from zuke._engine.run import load
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
