"""Run-management commands: ``zuke runs``, ``zuke cancel``, ``zuke locks``, ``zuke serve``.

Parsed with click (imported only when one of these commands is used). Each
command calls a library function from :mod:`zuke.runs` and renders its
result; errors propagate to :func:`zuke.cli.main`, which maps them to exit codes.
Click's own usage errors (a missing argument, an unknown option, a bad value)
become a :class:`~zuke.UsageError` too, so every one is a single ``zuke: …``
line. Option values are taken as text and checked here, so their messages read
like the rest of zuke's.

Click rather than typer: typer converts every option value through pydantic,
which costs about 40 ms of each command's start-up (docs/benchmarks.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import click

from zuke._clock import SYSTEM_CLOCK, iso, parse_iso
from zuke._duration import parse_duration
from zuke._errors import RunNotFoundError, UsageError, ZukeError
from zuke._loader import build_home
from zuke.cli import runs_view
from zuke.cli.click_base import HELP_SETTINGS as _HELP
from zuke.cli.click_base import Group
from zuke.cli.invocation import (
    Invocation,
    build_redactor,
    naming_store,
    needs_build,
    store_where,
)
from zuke.cli.state_cmd import state_app
from zuke.runs import (
    count_runs,
    list_runs,
    parse_query,
    prune_runs,
    show_run,
)

if TYPE_CHECKING:
    from zuke._build import Build


@click.group(cls=Group, context_settings=_HELP)
def app() -> None:
    """Run-management commands."""


def _inv() -> Invocation:
    inv = click.get_current_context().find_root().obj
    assert isinstance(inv, Invocation)
    return inv


@app.group("runs", invoke_without_command=True, context_settings=_HELP)
@click.pass_context
def runs_app(ctx: click.Context) -> None:
    """List, show and prune recorded runs."""
    if ctx.invoked_subcommand is None:  # ``zuke runs`` alone lists runs
        ctx.invoke(runs_list)


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


@runs_app.command("list", context_settings=_HELP)
@click.option("--status", metavar="STATUS", help="only runs with this status")
@click.option("--target", metavar="TARGET", help="only runs that plan this target")
@click.option("--build", metavar="BUILD", help="only runs of this build (class name)")
@click.option("--since", metavar="ISO", help="only runs created at or after (ISO)")
@click.option("--limit", metavar="N", help="at most this many runs")
@click.option("--counts", is_flag=True, help="count runs by status")
@click.option("--json", is_flag=True, help="machine-readable output")
def runs_list(
    status: str | None = None,
    target: str | None = None,
    build: str | None = None,
    since: str | None = None,
    limit: str | None = None,
    counts: bool = False,
    json: bool = False,
) -> None:
    """List runs, newest first."""
    inv = _inv()
    query = parse_query(
        status=status,
        target=target,
        since=_instant("--since", since),
        limit=_whole_number("--limit", limit),
        build=build,
    )
    store = inv.store()
    where = store_where(store)
    if counts:
        tally = count_runs(store, query)
        inv.print(runs_view.counts_json(tally) if json else runs_view.counts_text(tally, where))
        return
    found = list_runs(store, query)
    inv.print(runs_view.runs_json(found) if json else runs_view.runs_table(found, where))


@runs_app.command("show", context_settings=_HELP)
@click.argument("run_id")
@click.option("--json", is_flag=True, help="the raw record")
def runs_show(run_id: str, json: bool) -> None:
    """Show one run: targets, signals and audit trail.

    RUN_ID is the run's id.
    """
    inv = _inv()
    store = inv.store()
    record = show_run(store, run_id)
    if json:
        inv.print(runs_view.record_json(record))
        return
    claims = None
    if record.status in ("running", "cancelling"):  # who holds it now, from the store
        try:
            claims = store.list_locks(run_id=run_id)
        except (ZukeError, AttributeError, NotImplementedError):
            claims = None  # a store that cannot list locks: the record's view only
    inv.print(runs_view.record_text(record, claims=claims, now_ms=SYSTEM_CLOCK.now_ms()))


@runs_app.command("prune", context_settings=_HELP)
@click.option("--keep", metavar="DURATION", help="keep runs younger than this (e.g. 90d)")
@click.option("--keep-last", metavar="N", help="keep the newest N finished runs")
@click.option("--dry-run", is_flag=True, help="only say what would go")
def runs_prune(keep: str | None, keep_last: str | None, dry_run: bool) -> None:
    """Delete finished runs; a running or suspended run is never pruned."""
    inv = _inv()
    if keep_last is not None and not (keep_last.isascii() and keep_last.isdigit()):
        raise UsageError(f"--keep-last {keep_last}: expected a whole number >= 0")
    keep_ms = None if keep is None else _keep_duration(keep)
    store = inv.store()
    ids = prune_runs(
        store,
        keep_ms=keep_ms,
        keep_last=None if keep_last is None else int(keep_last),
        now_ms=SYSTEM_CLOCK.now_ms(),
        dry_run=dry_run,
    )
    verb = "Would prune" if dry_run else "Pruned"
    where = runs_view.safe(store_where(store))
    inv.print(f"{verb} {len(ids)} run(s)" + (": " + ", ".join(ids) if ids else f" in {where}."))


def _keep_duration(text: str) -> int:
    """``--keep 90d``: a duration with its unit. A bare number would be milliseconds, and
    ``--keep 1`` would then prune every finished run: refused, with what was likely meant."""
    number = text.strip()
    if number.isascii() and number.replace(".", "", 1).isdigit():
        last = number if number.isdigit() else "N"
        raise UsageError(
            f"--keep {text}: a duration needs its unit, e.g. --keep {number}d (days) or "
            f"--keep 90d; to keep the newest runs instead, --keep-last {last}"
        )
    return parse_duration(text, what="--keep")


@app.command("cancel", context_settings=_HELP)
@click.argument("run_id")
@click.option("--actor", metavar="NAME", help="who is cancelling (recorded)")
@click.option(
    "--wait", default="1m", show_default=True, metavar="DURATION",
    help="how long to wait for a live owner to stop the run",
)  # fmt: skip
@click.option(
    "--no-compensations", is_flag=True,
    help="settle a run whose owner is gone without its on_cancel compensations, "
    "recorded on the run as your choice (where the build file is missing or broken)",
)  # fmt: skip
@click.option("--skip-compensations", is_flag=True, hidden=True)  # the earlier spelling
def cancel(
    run_id: str, actor: str | None, wait: str, no_compensations: bool, skip_compensations: bool
) -> None:
    """Cancel a run from any process.

    A live owner is asked to stop (it releases its own locks); a run whose owner
    is gone is settled here, its compensations walked, and its claims released.
    Without a build that loads, a run that may owe compensations is refused
    unless --no-compensations. RUN_ID is the run to cancel.
    """
    from zuke._provenance import build_origin, resolve_actor
    from zuke.runs import cancel_run  # loaded only here: a listing never needs it

    inv = _inv()
    store = inv.store()
    build = inv.load_build()
    unloaded = None
    if inv.problem is not None:
        unloaded = str(
            needs_build(inv.problem, f"zuke cancel {run_id}", "to run its compensations")
        )
    result = cancel_run(
        store,
        run_id,
        actor=resolve_actor(actor, inv.env),
        origin=build_origin(inv.env),
        build_name=build.__name__ if build else None,
        wait_ms=parse_duration(wait, what="--wait"),
        build=build,
        env=inv.env,
        compensations="skip" if no_compensations or skip_compensations else "run",
        no_build_reason=unloaded,
    )
    inv.print(runs_view.safe(result.summary()))
    for warning in result.warnings:
        inv.err.write(f"zuke: {runs_view.safe(warning)}\n")
    from zuke.cli import gha

    redact = build_redactor(build, {}, inv.env).text
    gha.publish(gha.cancel_report(result, redact), inv.env, inv.err, redact)


app.add_command(state_app)  # ``zuke state init`` (zuke/cli/state_cmd.py)


@app.group("locks", invoke_without_command=True, context_settings=_HELP)
@click.pass_context
def locks_app(ctx: click.Context) -> None:
    """See who holds which lock; break a stuck holder's claim."""
    if ctx.invoked_subcommand is None:  # ``zuke locks`` alone lists them
        ctx.invoke(locks_list)


@locks_app.command("list", context_settings=_HELP)
@click.option("--json", is_flag=True, help="machine-readable output")
def locks_list(json: bool = False) -> None:
    """List every claim not released: holder, run, since, expiry, fence."""
    from zuke.runs.locks import list_locks

    inv = _inv()
    store = inv.store()
    found = list_locks(store, clock=SYSTEM_CLOCK)
    from zuke.cli import locks_view

    if not found and not json:  # say where nothing was found
        inv.print(f"No locks held in {runs_view.safe(store_where(store))}.")
        return
    inv.print(locks_view.locks_json(found) if json else locks_view.locks_table(found))


@locks_app.command("break", context_settings=_HELP)
@click.argument("key")
@click.option("--reason", required=True, metavar="TEXT", help="why (recorded on the holder's run)")
@click.option("--force", is_flag=True, help="break even while the holder's run is alive")
@click.option("--actor", metavar="NAME", help="who is breaking it (recorded)")
def locks_break(key: str, reason: str, force: bool, actor: str | None) -> None:
    """Remove a claim without its token; refused while its holder's run is alive.

    KEY is the lock key (see zuke locks list).
    """
    from zuke._provenance import resolve_actor
    from zuke.runs.locks import break_lock

    inv = _inv()
    result = break_lock(
        inv.store(),
        key,
        reason=reason,
        actor=resolve_actor(actor, inv.env),
        force=force,
        clock=SYSTEM_CLOCK,
    )
    inv.print(runs_view.safe(result.summary()))
    for warning in result.warnings:
        inv.err.write(f"zuke: {runs_view.safe(warning)}\n")


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


def command_help(argv: Sequence[str]) -> str:
    """The help of the command ``argv`` names (``runs show`` in ``runs show X --help``).

    Built from the command tree alone: nothing is parsed for action, no
    callback runs, no store is opened (``zuke.cli.help_cmd``).
    """
    ctx = click.Context(app, info_name="zuke", **app.context_settings)
    command: click.Command = app
    tokens = iter(argv)
    for token in tokens:
        if token == "--" or not isinstance(command, click.Group):
            break
        if token in ("--file", "-f"):
            next(tokens, None)
        if token.startswith("-"):
            continue
        sub = command.get_command(ctx, token)
        if sub is None:  # not one of its commands: the group's own help lists them
            break
        command = sub
        ctx = click.Context(sub, info_name=token, parent=ctx, **sub.context_settings)
    return ctx.get_help() + "\n"


def run_command(
    argv: Sequence[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path | None = None,
) -> int:
    """Run a management command; returns the exit code (``home``: the build file's directory,
    when the caller knows it: ``python build.py``)."""
    if argv[0] == "serve":
        from zuke._serve.__main__ import main as serve_main

        return serve_main(list(argv[1:]))
    file, argv = _take_file_flag(argv)
    home = build_home(file, env) if home is None or file is not None else home
    inv = Invocation(env=env, out=out, err=err, build=build, file=file, home=home)
    # Not standalone: click's usage errors come back as exceptions and become one
    # zuke line; --help comes back as its exit code; zuke's errors propagate to main().
    try:
        code = app.main(args=list(argv), prog_name="zuke", obj=inv, standalone_mode=False)
    except click.exceptions.Abort:
        raise KeyboardInterrupt from None
    except click.exceptions.Exit as exc:  # raised by a callback; main() returns the others
        return exc.exit_code
    except click.ClickException as exc:  # UsageError and its kin (NoSuchOption, BadParameter, …)
        raise UsageError(_one_line(exc)) from None
    except RunNotFoundError as exc:  # say which store it was looked for in
        raise naming_store(exc, inv.opened) from None
    return code if isinstance(code, int) else 0


def _one_line(exc: click.ClickException) -> str:
    message = " ".join(exc.format_message().split())
    message += "" if message.endswith((".", "?")) else "."
    where = getattr(getattr(exc, "ctx", None), "command_path", None) or "zuke"
    return f"{message} Run `{where} --help` for the usage."
