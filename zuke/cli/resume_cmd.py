"""``zuke resume``: deliver a signal and resume one run, or sweep (``--check``).

::

    zuke resume RUN_ID [--signal NAME [--data JSON] [--signal-id ID]]
                [--force-graph] [--resume-degraded] [--actor NAME] [--PARAM VALUE ...]
    zuke resume --check [RUN_ID] [--json]

Parsed here, not with click: a resume takes the build's own parameter flags
(non-secret values may be overridden; secrets come from the environment
again), so it needs the loaded build, as running targets does. The work is
:func:`zuke.runs.resume.resume_run_async` and
:func:`zuke.runs.sweep.resume_check_async`; this module parses and renders.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from zuke._errors import BuildDefinitionError, RunNotFoundError, UsageError
from zuke._inert import console_text
from zuke._jsondepth import check_json_text_depth
from zuke._text import check_text
from zuke.cli import args as cli_args
from zuke.cli.invocation import build_redactor, known_secrets, naming_store, needs_build

if TYPE_CHECKING:
    from collections.abc import Callable

    from zuke._build import Build
    from zuke._engine.observer import Observer
    from zuke._engine.run import RunOptions
    from zuke.cli.console import ConsoleReporter
    from zuke.runs.continuation import ResumeOptions

USAGE = """\
Usage: zuke resume RUN_ID [--signal NAME [--data JSON] [--signal-id ID]]
                   [--force-graph] [--resume-degraded] [--actor NAME] [--PARAM VALUE ...]
       zuke resume --check [RUN_ID] [--json] [--force-graph] [--resume-degraded] [--actor NAME]
       zuke resume --check --watch [--every DURATION] [--json]

  Deliver a signal to a suspended run and resume it; or, with --check, re-check
  the gates of this build's suspended runs (a sweep). See docs/orchestration.md.

Options:
  --signal NAME       the signal to deliver (a gate's external_signal name)
  --data JSON         its payload: JSON of at most 64 KiB, nested at most 64 levels
  --signal-id ID      the delivery's id (default: a hash of the name and the data)
  --force-graph       resume although the build's targets changed since the run
  --resume-degraded   resume although the run's record lost writes
  --actor NAME        who is resuming (recorded on the run)
  --PARAM VALUE       override a non-secret parameter of the build (zuke --help lists them)
  --check             sweep: every suspended run of this build, or just RUN_ID
  --json              with --check: the sweep's report as JSON (--watch: a line per sweep)
  --watch             with --check: sweep now, then every --every, until SIGTERM or Ctrl-C
                      (on Postgres also within a second of a signal); see docs/operations.md
  --every DURATION    with --watch: the interval (default 5m)
  -f, --file PATH     the build file (default build.py, or ZUKE_FILE)
  -h, --help          show this help
"""

_VALUE = {"--signal", "--data", "--signal-id", "--every"}
_SWITCH = {"--force-graph", "--resume-degraded", "--check", "--json", "--watch"}


def _split(argv: list[str]) -> tuple[dict[str, str], set[str], list[str]]:
    """Take the resume flags out of ``argv``; the rest is a build command line."""
    values: dict[str, str] = {}
    switches: set[str] = set()
    rest: list[str] = []
    i = 0
    while i < len(argv):
        if argv[i] == cli_args.END_OF_OPTIONS:  # the rest are operands: the parser's to read
            rest.extend(argv[i:])
            break
        flag, has_inline, inline = argv[i].partition("=")
        i += 1
        if flag in _SWITCH:
            if has_inline:
                raise UsageError(f"{flag} takes no value; drop '={inline}'")
            switches.add(flag)
        elif flag in _VALUE:
            if has_inline:
                values[flag] = inline
            elif i < len(argv):
                values[flag] = argv[i]
                i += 1
            else:
                raise UsageError(f"{flag} needs a value")
        else:
            rest.append(argv[i - 1])
    return values, switches, rest


def parse_data(text: str | None) -> Any:
    """``--data``: JSON of at most 64 KiB and 64 levels; the payload is never echoed back."""
    from zuke.runs.resume import MAX_SIGNAL_BYTES

    if text is None:
        return {}
    if len(text.encode()) > MAX_SIGNAL_BYTES:
        raise UsageError(
            f"--data is {len(text.encode())} bytes; the limit is {MAX_SIGNAL_BYTES} (64 KiB). "
            "Send a reference (a URL, an id) instead"
        )
    check_json_text_depth(text, what="--data")  # before json.loads, which recurses per level
    try:
        data = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        where = ""
        if isinstance(exc, json.JSONDecodeError):
            where = f" (line {exc.lineno}, column {exc.colno})"
        raise UsageError(
            f'--data is not JSON{where}; quote it for the shell, e.g. --data \'{{"by": "qa"}}\''
        ) from None
    check_text(data, what="--data")
    return data


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def run_resume(
    argv: list[str],
    *,
    build: type[Build] | None,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path | None = None,
    live: bool | None = None,
) -> int:
    """``zuke resume …``; ``live`` forces live progress on or off (default: ``out`` is a
    terminal)."""
    from zuke._loader import build_home, find_build_file, load_build_class

    values, switches, rest = _split(argv[1:])
    file, _ = cli_args.prescan(rest)
    if home is None or file is not None:
        home = build_home(file, env)
    given = build

    def reload() -> type[Build]:  # the watcher's: build.py as it is now, or the caller's build
        if given is not None:
            return given
        return load_build_class(find_build_file(file, env), fresh=True)

    if build is None:
        path = find_build_file(file, env)
        try:
            build = load_build_class(path)
        except BuildDefinitionError as exc:
            if "--check" not in switches:
                raise needs_build(exc, "zuke resume RUN", "to continue the run") from None
            if "--watch" in switches:  # a sweeper outlives a bad merge: tried each sweep
                return _watch(None, reload, values, switches, rest, env=env, out=out, err=err,
                              home=home, live=live)  # fmt: skip
            from zuke.cli.sweep_output import check_without_build

            return check_without_build(exc, rest, switches, env=env, out=out, err=err,
                                       home=home)  # fmt: skip
    if "--watch" in switches:
        return _watch(build, reload, values, switches, rest, env=env, out=out, err=err,
                      home=home, live=live)  # fmt: skip
    return _resume(build, values, switches, rest, env=env, out=out, err=err, home=home, live=live)


def _request(
    parsed: cli_args.RunArgs, values: dict[str, str], switches: set[str]
) -> tuple[str | None, ResumeOptions]:
    """The command line's run and resume options; a usage error for what does not fit."""
    from zuke.runs.resume import ResumeOptions, SignalDelivery

    if parsed.skip or parsed.list or parsed.targets[1:]:
        raise UsageError(
            "usage: zuke resume RUN_ID [--signal NAME [--data JSON]] | "
            "zuke resume --check [RUN_ID] [--json]"
        )
    run_id = parsed.targets[0] if parsed.targets else None
    check = "--check" in switches
    if not check and run_id is None:
        raise UsageError("zuke resume needs a RUN_ID (or --check to sweep every suspended run)")
    if "--signal" not in values and ("--data" in values or "--signal-id" in values):
        raise UsageError("--data and --signal-id go with --signal NAME")
    if check and "--signal" in values:
        raise UsageError("--check sweeps; deliver a signal with zuke resume RUN_ID --signal NAME")
    watching = "--watch" in switches
    if "--every" in values and not watching:
        raise UsageError("--every goes with --watch: zuke resume --check --watch --every 5m")
    if watching:
        from zuke.cli.watch_cmd import parse_every

        if not check or run_id is not None:
            raise UsageError("--watch sweeps every suspended run: zuke resume --check --watch")
        parse_every(values.get("--every"))
    signal = None
    if "--signal" in values:
        data = parse_data(values.get("--data"))
        signal = SignalDelivery(values["--signal"], data, values.get("--signal-id"))
    resume = ResumeOptions(
        signal=signal,
        force_graph="--force-graph" in switches,
        resume_degraded="--resume-degraded" in switches,
        actor=parsed.actor,
        params=parsed.params,
    )
    return run_id, resume


def _warner(reporter: ConsoleReporter, err: TextIO) -> Callable[[str], None]:
    def warn(message: str) -> None:  # one line, whatever it quotes
        err.write(console_text(reporter.redactor.text(message)) + "\n")
        err.flush()

    return warn


def _run_options(
    parsed: cli_args.RunArgs,
    warn: Callable[[str], None],
    *,
    env: Mapping[str, str],
    home: Path,
    observers: list[Observer],
) -> RunOptions:
    from zuke._engine.run import RunOptions

    return RunOptions(
        params=parsed.params,
        env=env,
        actor=parsed.actor,
        on_warning=warn,
        on_interrupt=warn,
        observers=observers,
        handle_signals=threading.current_thread() is threading.main_thread(),
        cwd=home,
    )


def _watch(
    build: type[Build] | None,
    reload: Callable[[], type[Build]],
    values: dict[str, str],
    switches: set[str],
    rest: list[str],
    *,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path,
    live: bool | None,
) -> int:
    """``--check --watch``: the long-lived sweeper. A build that cannot be used — at the
    start or after a failed sweep — does not stop it (:class:`~zuke.cli.watch_cmd.BuildSweeps`);
    what the command line says without the build is checked at once."""
    from zuke._build import parameters
    from zuke.cli.console import ConsoleReporter
    from zuke.cli.sweep_output import sweep_text
    from zuke.cli.watch_cmd import BuildSweeps, Ready, parse_every, run_watch
    from zuke.runs.lifecycle import check_settings
    from zuke.runs.store import open_store

    as_json = "--json" in switches
    reporter = ConsoleReporter(out=err if as_json else out, err=err, live=live)
    warn = _warner(reporter, err)

    def prepare(loaded: type[Build]) -> Ready:
        parsed = cli_args.parse(rest, parameters(loaded))
        _, resume = _request(parsed, values, switches)
        reporter.redactor.add(*known_secrets(loaded, parsed.params, env))  # as it loaded
        observers: list[Observer] = [] if as_json else [reporter]
        options = _run_options(parsed, warn, env=env, home=home, observers=observers)
        return Ready(loaded, resume, options)

    if build is not None:  # the command line is checked against it now: exit 2 if it does not fit
        ready: Ready | None = prepare(build)
        store = open_store(env, build=build, cwd=home)
    else:
        try:  # without the build its parameter flags are unknown: checked once it loads
            bare: cli_args.RunArgs | None = cli_args.parse(rest, [])
        except UsageError:
            bare = None
        if bare is not None:
            _request(bare, values, switches)
        ready, store = None, open_store(env, cwd=home)
    check_settings(env, store)  # a bad setting is the operator's: said as itself, exit 2
    sweeps = BuildSweeps(store, ready, load=reload, prepare=prepare)
    return run_watch(sweeps, every_ms=parse_every(values.get("--every")), as_json=as_json,
                     out=out, err=err, redact=reporter.redactor.text,
                     render=sweep_text)  # fmt: skip


def _resume(
    build: type[Build],
    values: dict[str, str],
    switches: set[str],
    rest: list[str],
    *,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    home: Path,
    live: bool | None,
) -> int:
    from zuke._build import parameters
    from zuke.cli import gha
    from zuke.cli.console import ConsoleReporter
    from zuke.cli.progress import PauseOnRun, SweepProgress, on_terminal
    from zuke.runs.lifecycle import check_settings
    from zuke.runs.store import open_store

    parsed = cli_args.parse(rest, parameters(build))
    run_id, resume = _request(parsed, values, switches)
    check = "--check" in switches
    as_json = "--json" in switches
    reporter = ConsoleReporter(out=err if as_json else out, err=err, live=live,
                               redactor=build_redactor(build, parsed.params, env))  # fmt: skip
    # A sweep on a terminal: "12/300 runs checked" while it works; never piped, never --json.
    sweeping = None
    if check and not as_json and on_terminal(out, live):
        sweeping = SweepProgress(out)
    observers: list[Observer] = [] if as_json else [
        *([PauseOnRun(sweeping)] if sweeping else []), reporter,
    ]  # fmt: skip
    warn = _warner(reporter, err)
    options = _run_options(parsed, warn, env=env, home=home, observers=observers)
    # A sweep on a schedule may come before any run made the directory: "0 runs checked in
    # DIR" names it; a resume names a run, which a directory not there cannot hold.
    store = open_store(env, build=build, cwd=home, reading=not check)
    # A bad setting (ZUKE_RUN_LEASE_TTL=banana) is the operator's, said as itself; what is
    # raised past this point while loading is the build's.
    check_settings(env, store)
    if check:  # the sweep's modules load only for a sweep: a resume's start-up is its latency
        from zuke.cli.sweep_output import (
            access_failures,
            check_without_build,
            store_failures,
            write_report,
        )
        from zuke.runs.sweep import resume_check_async

        try:
            report = asyncio.run(
                resume_check_async(build, store, run_id=run_id, resume=resume, run=options,
                                   progress=sweeping.update if sweeping else None)
            )  # fmt: skip
        except RunNotFoundError as exc:
            raise naming_store(exc, store) from None
        except BuildDefinitionError as exc:  # its definitions raise: checked before any move
            return check_without_build(exc, rest, switches, env=env, out=out, err=err,
                                       home=home)  # fmt: skip
        finally:
            if sweeping is not None:
                sweeping.pause()
        write_report(report, store, as_json=as_json, out=out)  # first: warnings come after
        redact = reporter.redactor.text
        gha.publish(gha.sweep_report(report, run_id, redact), env, err, redact)
        store_failures(report, err)
        access_failures(report, err)
        from zuke.cli.after_sweep import run_hooks  # zuke_gh's dashboard, when configured

        hooks = run_hooks(store, env, err if as_json else out, err)
        return max(0 if report.ok else 1, hooks)
    from zuke.runs.resume import resume_run_async

    try:
        outcome = asyncio.run(resume_run_async(build, store, run_id or "", resume, options))
    except RunNotFoundError as exc:
        raise naming_store(exc, store) from None
    except BuildDefinitionError as exc:  # its definitions raise: before the run is taken
        raise needs_build(exc, "zuke resume RUN", "to continue the run") from None
    redact = reporter.redactor.text
    gha.publish(gha.resume_report(outcome, build.__name__, redact), env, err, redact)
    for note in outcome.notes:
        warn(f"zuke: {note}")
    if outcome.result is not None and outcome.result.record_error is not None:
        warn(f"zuke: {outcome.result.record_error}")
        return 1
    if outcome.action == "already-delivered":
        return 0
    if outcome.action == "resumed" and outcome.status == "cancelled" and not outcome.ok:
        return 130  # the continued run was cancelled (Ctrl-C, zuke cancel), as for a fresh run
    return 0 if outcome.ok else 1  # a gate's declared disposition that did its job is ok
