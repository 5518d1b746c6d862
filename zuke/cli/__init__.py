"""The ``zuke`` command: a thin layer over the library.

The pipeline is load → parse → dispatch → render. Run-management commands
(``runs``, ``resume``, ``cancel``, ``serve``) live in :mod:`zuke.cli.manage`
(click, imported only when one of them is used, so ``zuke --list`` stays light);
everything about a build (running targets, ``--list``, ``graph``) is parsed
here against the loaded build's targets and parameters. ``--help`` or ``-h``
anywhere, on any command, is decided first and only prints help
(:mod:`zuke.cli.help_cmd`).

Start-up is most of what a management command costs, so this module imports
only the light parts at the top: the engine, asyncio and the console load
inside the functions that load or run a build, never for ``zuke runs list``.

Exceptions become exit codes in one table, :data:`EXIT_CODES`.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from zuke._errors import (
    BuildDefinitionError,
    ParameterError,
    UnsafeIdError,
    UsageError,
    ZukeError,
)
from zuke._inert import console_text
from zuke.cli import args as cli_args
from zuke.cli.inert_stream import InertStream

if TYPE_CHECKING:
    from zuke._build import Build

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Exception type → exit code; the first matching entry wins.
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (UsageError, EXIT_USAGE),
    (ParameterError, EXIT_USAGE),
    (BuildDefinitionError, EXIT_USAGE),
    (UnsafeIdError, EXIT_USAGE),
    (ZukeError, EXIT_FAILED),
    (KeyboardInterrupt, EXIT_INTERRUPTED),
)


def exit_code_for(exc: BaseException) -> int:
    for kind, code in EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_FAILED


def main(
    argv: Sequence[str] | None = None,
    *,
    build: type[Build] | None = None,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    home: Path | None = None,
) -> int:
    """Run the CLI; returns the exit code.

    ``home`` is the directory of the build's file when the caller knows it (``python
    build.py``): a relative store path (``.zuke/runs``) is resolved there. Otherwise it is
    the build file's directory found from ``--file``/``ZUKE_FILE``/``./build.py``.
    """
    argv = cli_args.command_first(list(sys.argv[1:] if argv is None else argv))
    env = dict(os.environ) if env is None else env
    out = out or sys.stdout
    err = err or sys.stderr
    if argv[:1] != ["mcp"]:  # its stdout is the protocol's; every other line is guarded
        out, err = InertStream.wrap(out), InertStream.wrap(err)
    try:
        return _dispatch(argv, build=build, env=env, out=out, err=err, home=home)
    except BaseException as exc:
        if isinstance(exc, SystemExit):
            raise
        code = exit_code_for(exc)
        if isinstance(exc, KeyboardInterrupt):
            err.write("Interrupted.\n")
        elif isinstance(exc, ZukeError):
            err.write(f"zuke: {console_text(exc)}\n")  # one line, whatever the message quotes
        else:
            raise
        return code
    finally:
        for stream in (out, err):
            if isinstance(stream, InertStream):
                stream.finish()
            else:
                stream.flush()


def _dispatch(
    argv: list[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path | None,
) -> int:
    if cli_args.help_requested(argv):  # before any command parses or acts: help only
        from zuke.cli.help_cmd import show_help

        return show_help(argv, build=build, env=env, out=out)
    if cli_args.version_requested(argv):  # the package's version only: no build, no engine
        from zuke._version import __version__

        out.write(f"zuke {__version__}\n")
        return EXIT_OK
    if argv and argv[0] == "resume":  # takes the build's parameter flags: not click
        from zuke.cli.resume_cmd import run_resume

        return run_resume(argv, build=build, env=env, out=out, err=err, home=home)
    if argv and argv[0] == "mcp":  # the MCP server (an optional extra): not click
        from zuke.cli.mcp_cmd import run_mcp

        return run_mcp(argv, build=build, env=env, out=out, home=home)
    if argv and argv[0] in cli_args.MANAGEMENT_COMMANDS:
        from zuke.cli.manage import run_command  # click: imported only here

        return run_command(argv, build=build, env=env, out=out, err=err, home=home)
    return _build_command(argv, build=build, env=env, out=out, err=err, home=home)


def _build_command(
    argv: list[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path | None,
) -> int:
    # A build is loaded (and maybe run) from here on: the engine is needed now.
    from zuke._build import parameters
    from zuke._engine.loading import load  # no asyncio, no scheduler
    from zuke._loader import build_home, find_build_file, load_build_class
    from zuke.cli import listing

    file, _ = cli_args.prescan(argv)
    if build is None:
        build = load_build_class(find_build_file(file, env))
    if home is None or file is not None:
        home = build_home(file, env)
    params = parameters(build)
    parsed = cli_args.parse(argv, params)
    is_graph = bool(parsed.targets) and parsed.targets[0] == "graph"
    if parsed.list or is_graph:
        loaded = load(build, parsed.params, env, lenient=True)
        if is_graph:
            if parsed.format not in listing.GRAPH_FORMATS:
                raise UsageError(
                    f"--format {parsed.format}: expected one of {', '.join(listing.GRAPH_FORMATS)}"
                )
            text = listing.graph_text(loaded.graph, parsed.format)
        elif parsed.json:
            text = listing.list_json(loaded.graph, params)
        else:
            text = listing.list_text(loaded.graph, params)
        # A default or a description may quote a secret that was supplied.
        out.write(loaded.redactor.text(text) + "\n")
        return EXIT_OK
    targets = parsed.targets
    if not targets:
        loaded = load(build, parsed.params, env, lenient=True)
        if "default" not in loaded.graph.specs:
            out.write(listing.help_text(loaded.graph, params) + "\n")
            return EXIT_OK
        targets = ["default"]
    return run_targets(build, targets, parsed, env=env, out=out, err=err, home=home)


def run_targets(
    build: type[Build],
    targets: Sequence[str],
    parsed: cli_args.RunArgs,
    *,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path | None = None,
) -> int:
    import asyncio

    from zuke._build import parameters
    from zuke._engine.preflight import scrub
    from zuke._engine.run import RunOptions
    from zuke._params import resolve
    from zuke.cli.console import ConsoleReporter
    from zuke.runs.owner import run_owned

    reporter = ConsoleReporter(out=out, err=err)
    # The same secrets the run redacts: every element, number spelling and default.
    known = resolve(parameters(build), parsed.params, env, lenient=True).secrets
    reporter.redactor.add(*known)

    def on_interrupt(message: str) -> None:  # also used for warnings: one line on stderr
        err.write(console_text(reporter.redactor.text(message)) + "\n")
        err.flush()

    options = RunOptions(
        targets=list(targets),
        params=parsed.params,
        env=env,
        skip=parsed.skip,
        parallel=parsed.parallel,
        actor=parsed.actor,
        observers=[reporter],
        handle_signals=threading.current_thread() is threading.main_thread(),
        on_interrupt=on_interrupt,
        on_warning=on_interrupt,
        state=parsed.state,
        cwd=home,
        inline=True,  # the loop below runs this run alone (docs/architecture.md, Rules)
    )
    try:  # a signal stored while it ran is consumed before it returns (every owner's rule)
        result = asyncio.run(run_owned(build, options))
    except UsageError as exc:  # `--parallel 4`: say why "4" was taken for a target
        raise _with_hint(exc, parsed) from None
    except Exception as exc:  # the engine scrubs its own; this covers what it did not raise
        clean = scrub(exc, reporter.redactor)
        if clean is exc:
            raise
        raise clean from None
    from zuke.cli import gha

    redact = reporter.redactor.text
    gha.publish(gha.run_report(result, build.__name__, redact), env, err, redact)
    if result.record_error is not None:
        # The run's outcome is not in its record: never exit 0 (docs/cli.md, exit codes).
        err.write(f"zuke: {console_text(result.record_error)}\n")
        err.flush()
        return EXIT_FAILED
    if result.handled:  # a gate's declared disposition cancelled (rolled back) the run: ok
        on_interrupt(f"zuke: {result.settled_by}")
        return EXIT_OK
    if result.status == "cancelled":
        return EXIT_INTERRUPTED
    return EXIT_OK if result.ok else EXIT_FAILED


def _with_hint(exc: UsageError, parsed: cli_args.RunArgs) -> UsageError:
    for word in parsed.stray:
        hint = parsed.unknown_target_hint(word)
        if hint and str(exc).startswith(f"Unknown target: {word}."):
            return UsageError(f"Unknown target: {word}. {hint}.")
    return exc


def entrypoint() -> None:
    """The console script: exit with :func:`main`'s code."""
    from zuke.cli import lean_asyncio

    lean_asyncio.install()  # asyncio without ssl until something needs ssl
    _exit(main)


def _exit(run_main: Callable[[], int]) -> None:
    try:
        code = run_main()
    except BrokenPipeError:
        # The reader went away (`zuke --list | head`): stop quietly, as other tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        code = EXIT_FAILED
    # No body thread outlives the run (an attempt ends only when its body returned),
    # so a plain exit never kills work mid-way; a second Ctrl-C is the one way out.
    sys.exit(code)


def run(build: type[Build], argv: Sequence[str] | None = None) -> None:
    """``python build.py ...``: the same CLI for this build class, then exit; its store is
    beside the script, as for ``zuke --file``."""
    script = getattr(sys.modules.get("__main__"), "__file__", None)  # the file python ran
    file = script or getattr(sys.modules.get(build.__module__), "__file__", None)
    home = Path(file).resolve().parent if isinstance(file, str) else None
    _exit(lambda: main(argv, build=build, home=home))


__all__ = ["EXIT_CODES", "entrypoint", "exit_code_for", "main", "run"]
