"""Run-management commands: ``zuke runs``, ``zuke cancel``, ``zuke serve``.

Parsed with typer (imported only when one of these commands is used). Each
command calls a library function from :mod:`zuke.runs` and renders its
result; errors propagate to :func:`zuke.cli.main`, which maps them to exit codes.
Typer's own usage errors (a missing argument, an unknown option, a bad value)
become a :class:`~zuke.UsageError` too, so every one is a single ``zuke: …``
line rather than typer's boxed panel. Option values are taken as text and
checked here, so their messages read like the rest of zuke's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from zuke._clock import SYSTEM_CLOCK, iso, parse_iso
from zuke._duration import parse_duration
from zuke._errors import UsageError
from zuke._loader import find_build_file, load_build_class
from zuke._provenance import build_origin, resolve_actor
from zuke.cli import runs_view
from zuke.runs import (
    cancel_run,
    count_runs,
    list_runs,
    open_store,
    parse_query,
    prune_runs,
    show_run,
)

if TYPE_CHECKING:
    from zuke._build import Build


@dataclass
class Invocation:
    env: Mapping[str, str]
    out: TextIO
    err: TextIO
    build: type[Build] | None

    def print(self, text: str) -> None:
        self.out.write(text + "\n")


_HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=_HELP,
)
runs_app = typer.Typer(
    add_completion=False,
    no_args_is_help=False,
    help="List, show and prune recorded runs.",
    context_settings=_HELP,
)
app.add_typer(runs_app, name="runs")


def _inv(ctx: typer.Context) -> Invocation:
    inv = ctx.find_root().obj
    assert isinstance(inv, Invocation)
    return inv


@runs_app.callback(invoke_without_command=True)
def _runs_default(ctx: typer.Context) -> None:
    """``zuke runs`` alone lists runs."""
    if ctx.invoked_subcommand is None:
        runs_list(
            ctx, status=None, target=None, build=None, since=None, limit=None, counts=False,
            json=False,
        )  # fmt: skip


def _whole_number(flag: str, text: str | None) -> int | None:
    """``--limit 20``: ASCII digits only (the number grammar of docs/parameters.md)."""
    if text is None:
        return None
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise UsageError(f"{flag} {text}: expected a positive whole number")
    return int(text)


def _instant(flag: str, text: str | None) -> str | None:
    """An ISO-8601 time as canonical UTC (``…T00:00:00.000Z``), so every store compares alike."""
    if text is None:
        return None
    ms = parse_iso(text)
    if ms is None or not text.isascii():
        raise UsageError(
            f"{flag} {text}: expected an ISO-8601 time such as 2026-01-31T12:00:00Z "
            "or 2026-01-31T17:30:00+05:30"
        )
    return iso(ms)


@runs_app.command("list")
def runs_list(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(help="only runs with this status")] = None,
    target: Annotated[str | None, typer.Option(help="only runs that plan this target")] = None,
    build: Annotated[str | None, typer.Option(help="only runs of this build (class name)")] = None,
    since: Annotated[str | None, typer.Option(help="only runs created at or after (ISO)")] = None,
    limit: Annotated[str | None, typer.Option(help="at most this many runs")] = None,
    counts: Annotated[bool, typer.Option("--counts", help="count runs by status")] = False,
    json: Annotated[bool, typer.Option("--json", help="machine-readable output")] = False,
) -> None:
    """List runs, newest first."""
    inv = _inv(ctx)
    query = parse_query(
        status=status,
        target=target,
        since=_instant("--since", since),
        limit=_whole_number("--limit", limit),
        build=build,
    )
    store = open_store(inv.env, build=inv.build)
    if counts:
        tally = count_runs(store, query)
        inv.print(runs_view.counts_json(tally) if json else runs_view.counts_text(tally))
        return
    found = list_runs(store, query)
    inv.print(runs_view.runs_json(found) if json else runs_view.runs_table(found))


@runs_app.command("show")
def runs_show(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="the run's id")],
    json: Annotated[bool, typer.Option("--json", help="the raw record")] = False,
) -> None:
    """Show one run: targets, signals and audit trail."""
    inv = _inv(ctx)
    record = show_run(open_store(inv.env, build=inv.build), run_id)
    inv.print(runs_view.record_json(record) if json else runs_view.record_text(record))


@runs_app.command("prune")
def runs_prune(
    ctx: typer.Context,
    keep: Annotated[str | None, typer.Option(help="keep runs younger than this (e.g. 90d)")] = None,
    keep_last: Annotated[str | None, typer.Option(help="keep the newest N finished runs")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="only say what would go")] = False,
) -> None:
    """Delete finished runs; a running or suspended run is never pruned."""
    inv = _inv(ctx)
    if keep_last is not None and not (keep_last.isascii() and keep_last.isdigit()):
        raise UsageError(f"--keep-last {keep_last}: expected a whole number >= 0")
    keep_ms = None if keep is None else parse_duration(keep, what="--keep")
    ids = prune_runs(
        open_store(inv.env, build=inv.build),
        keep_ms=keep_ms,
        keep_last=None if keep_last is None else int(keep_last),
        now_ms=SYSTEM_CLOCK.now_ms(),
        dry_run=dry_run,
    )
    verb = "Would prune" if dry_run else "Pruned"
    inv.print(f"{verb} {len(ids)} run(s)" + (": " + ", ".join(ids) if ids else "."))


@app.command("cancel")
def cancel(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(help="the run to cancel")],
    actor: Annotated[str | None, typer.Option(help="who is cancelling (recorded)")] = None,
    wait: Annotated[
        str, typer.Option(help="how long to wait for a live owner to stop the run")
    ] = "1m",
) -> None:
    """Cancel a run from any process.

    A live owner is asked to stop (it releases its own locks); a run whose owner
    is gone is settled here and its claims released.
    """
    inv = _inv(ctx)
    result = cancel_run(
        open_store(inv.env, build=inv.build),
        run_id,
        actor=resolve_actor(actor, inv.env),
        origin=build_origin(inv.env),
        build_name=inv.build.__name__ if inv.build else None,
        wait_ms=parse_duration(wait, what="--wait"),
    )
    inv.print(result.summary())
    for warning in result.warnings:
        inv.err.write(f"zuke: {warning}\n")


def _build_if_present(file: str | None, env: Mapping[str, str]) -> type[Build] | None:
    """The build named by ``--file``, else the working directory's, if there is one.

    Management commands use it for ownership checks and its ``state_store()``.
    """
    try:
        path = find_build_file(file, env)
    except UsageError:
        if file is not None:
            raise
        return None
    return load_build_class(path)


def _take_file_flag(argv: Sequence[str]) -> tuple[str | None, list[str]]:
    """Split ``--file PATH`` / ``-f PATH`` / ``--file=PATH`` off a management command line."""
    rest: list[str] = []
    file: str | None = None
    it = iter(argv)
    for token in it:
        if token in ("--file", "-f"):
            file = next(it, None)
            if file is None:
                raise UsageError(f"{token} needs a value")
        elif token.startswith("--file="):
            file = token.split("=", 1)[1]
        else:
            rest.append(token)
    return file, rest


def run_command(
    argv: Sequence[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
) -> int:
    """Run a management command; returns the exit code."""
    if argv[0] == "serve":
        from zuke._serve.__main__ import main as serve_main

        return serve_main(list(argv[1:]))
    file, argv = _take_file_flag(argv)
    inv = Invocation(env=env, out=out, err=err, build=build or _build_if_present(file, env))
    command = typer.main.get_command(app)
    # Not standalone: typer's usage errors come back as exceptions and become one
    # zuke line; --help comes back as its exit code; zuke's errors propagate to main().
    try:
        code = command.main(args=list(argv), prog_name="zuke", obj=inv, standalone_mode=False)
    except typer.Abort:
        raise KeyboardInterrupt from None
    except typer.TyperException as exc:  # the base of typer's (vendored click's) usage errors
        raise UsageError(_one_line(exc)) from None
    return code if isinstance(code, int) else 0


def _one_line(exc: Exception) -> str:
    format_message = getattr(exc, "format_message", None)
    text = format_message() if callable(format_message) else str(exc)
    message = " ".join(str(text).split())
    message += "" if message.endswith(".") else "."
    where = getattr(getattr(exc, "ctx", None), "command_path", None) or "zuke"
    return f"{message} Run `{where} --help` for the usage."
