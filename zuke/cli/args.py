"""Parsing the command line of a build: targets, built-in flags and dynamic parameter flags.

Targets and parameters come from the loaded build, so this is a small parser
of its own rather than a static click signature. ``--name value`` and
``--name=value`` both work; a boolean parameter's bare ``--flag`` means true;
``--`` ends the options (what follows are targets). :func:`help_requested` is
the one rule for ``--help`` that :func:`zuke.cli.main` applies to every command.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from zuke._errors import UsageError

if TYPE_CHECKING:
    from dataclasses import dataclass

    from zuke._params import Parameter
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: Commands handled by the management CLI rather than as targets.
COMMANDS = ("graph", "runs", "resume", "cancel", "locks", "state", "serve", "mcp")
#: The commands :mod:`zuke.cli.manage` runs (``graph`` is a view of the build).
MANAGEMENT_COMMANDS = ("runs", "resume", "cancel", "locks", "state", "serve", "mcp")
_VALUE_FLAGS = {"--skip", "--actor", "--file", "-f", "--format"}
_SWITCHES = {"--list", "-l", "--json", "--state", "--help", "-h"}
HELP_FLAGS = ("--help", "-h")
VERSION_FLAG = "--version"
#: ``--``: every token after it is an operand (a target, a run id), never an option.
END_OF_OPTIONS = "--"


@dataclass
class RunArgs:
    """A parsed build command line."""

    targets: list[str] = field(default_factory=list)
    params: dict[str, list[str]] = field(default_factory=dict)
    skip: list[str] = field(default_factory=list)
    parallel: int = 1
    list: bool = False
    json: bool = False
    state: bool = False
    help: bool = False
    actor: str | None = None
    file: str | None = None
    format: str = "text"
    #: a bare word right after a flag that takes its value only as ``--flag=value``
    #: (``--parallel 4``, ``--dry-run false``): the word, and the flag, for the hint
    stray: dict[str, str] = field(default_factory=dict)

    def unknown_target_hint(self, word: str) -> str | None:
        """Why ``word`` is taken for a target: it follows an ``=``-only flag."""
        flag = self.stray.get(word)
        if flag is None:
            return None
        what = "its number" if flag == "--parallel" else "a value"
        return f"{flag} takes {what} only as {flag}={word}: a bare word after it is a target"


def prescan(argv: Sequence[str]) -> tuple[str | None, bool]:
    """The ``--file`` value and whether help was asked for, before the build is loaded.

    Both stop at ``--``. A help flag is never taken as the value of ``--file``.
    """
    file: str | None = None
    wants_help = False
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == END_OF_OPTIONS:
            break
        if token in HELP_FLAGS:
            wants_help = True
        elif token in ("--file", "-f"):
            if i < len(tokens) and tokens[i] not in (*HELP_FLAGS, END_OF_OPTIONS):
                file = tokens[i]
                i += 1
        elif token.startswith("--file="):
            file = token.split("=", 1)[1]
    return file, wants_help


def help_requested(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for help, decided before anything else is parsed, for every command.

    The rule is one and the same for the build's commands, ``resume``, ``mcp``,
    ``serve`` and the click commands: a token that is exactly ``--help`` or
    ``-h``, anywhere before ``--``, is a help request, even where an option
    expects its value (``--service --help`` asks for help; a value that is
    literally ``--help`` is written ``--service=--help``). After ``--`` it is an
    operand like any other. So whatever else the line says, help acts on nothing.
    """
    return prescan(argv)[1]


def command_word(argv: Sequence[str]) -> str | None:
    """The first word of a command line that is neither a help flag nor ``--file PATH``
    (``graph`` in ``zuke -f ci/release.py graph --help``)."""
    tokens = iter(argv)
    for token in tokens:
        if token in ("--file", "-f"):
            next(tokens, None)
        elif token == END_OF_OPTIONS:
            return next(tokens, None)
        elif not (token in HELP_FLAGS or token.startswith("--file=")):
            return token
    return None


def lists(argv: Sequence[str]) -> bool:
    """Whether a build's command line asks for ``--list`` (or ``-l``) before ``--``."""
    tokens = list(argv)
    end = tokens.index(END_OF_OPTIONS) if END_OF_OPTIONS in tokens else len(tokens)
    return any(t in ("--list", "-l") for t in tokens[:end])


def version_requested(argv: Sequence[str]) -> bool:
    """Whether ``argv`` asks for zuke's version: ``--version`` before ``--`` on a build's
    command line (``zuke --version``); a management command has no such option."""
    tokens = list(argv)
    if tokens and tokens[0] in MANAGEMENT_COMMANDS:
        return False
    end = tokens.index(END_OF_OPTIONS) if END_OF_OPTIONS in tokens else len(tokens)
    return VERSION_FLAG in tokens[:end]


def without_help(argv: Sequence[str]) -> list[str]:
    """``argv`` without its help flags (those before ``--``)."""
    tokens = list(argv)
    end = tokens.index(END_OF_OPTIONS) if END_OF_OPTIONS in tokens else len(tokens)
    return [t for t in tokens[:end] if t not in HELP_FLAGS] + tokens[end:]


def command_first(argv: Sequence[str]) -> list[str]:
    """``zuke --file x.py runs list`` as ``zuke runs list --file x.py``.

    Only ``--file`` may come before a management command: it says which build
    the command is about, wherever it is written. So may a help flag:
    ``zuke -h runs list`` is the help of ``zuke runs list``.
    """
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        if tokens[i] in ("--file", "-f") and i + 1 < len(tokens):
            i += 2
        elif tokens[i].startswith("--file=") or tokens[i] in HELP_FLAGS:
            i += 1
        else:
            break
    if 0 < i < len(tokens) and tokens[i] in MANAGEMENT_COMMANDS:
        return [tokens[i], *tokens[:i], *tokens[i + 1 :]]
    return tokens


def _cpu_count() -> int:
    return os.cpu_count() or 4


def _parallel(value: str | None) -> int:
    if value is None or value == "":
        return _cpu_count()
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"--parallel={value}: expected a whole number of targets") from None
    if n < 1:
        raise UsageError(f"--parallel={value}: expected a number of targets of at least 1")
    return n


def parse(argv: Sequence[str], params: Sequence[Parameter[Any]]) -> RunArgs:
    """Parse ``argv`` for a build whose parameters are ``params``."""
    by_flag = {p.flag: p for p in params}
    out = RunArgs()
    tokens = list(argv)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == END_OF_OPTIONS:
            out.targets.extend(tokens[i:])
            break
        if not token.startswith("-") or token == "-":
            out.targets.append(token)
            continue
        flag, has_inline, inline = token.partition("=")
        if flag in _SWITCHES:
            if has_inline:
                raise UsageError(f"{flag} takes no value; drop '={inline}'")
            if flag in ("--list", "-l"):
                out.list = True
            elif flag in ("--help", "-h"):
                out.help = True
            else:
                setattr(out, flag[2:], True)
            continue
        if flag == "--parallel":
            out.parallel = _parallel(inline if has_inline else None)
            _note_stray(out, flag, tokens, i, bool(has_inline))
            continue
        param = by_flag.get(flag)
        if param is not None and param.kind == "boolean" and not param.is_array and not has_inline:
            out.params.setdefault(param.name, []).append("true")
            _note_stray(out, flag, tokens, i, bool(has_inline))
            continue
        if flag in _VALUE_FLAGS or param is not None:
            if has_inline:
                value = inline
            elif i < len(tokens):
                value = tokens[i]
                i += 1
            else:
                raise UsageError(f"{flag} needs a value")
            if param is not None:
                out.params.setdefault(param.name, []).append(value)
            elif flag == "--skip":
                out.skip.extend(v for v in value.split(",") if v)
            elif flag == "--actor":
                out.actor = value
            elif flag in ("--file", "-f"):
                out.file = value
            else:
                out.format = value
            continue
        raise UsageError(_unknown_flag(flag, [*by_flag, *_VALUE_FLAGS, *_SWITCHES, "--parallel"]))
    return out


def _note_stray(out: RunArgs, flag: str, tokens: Sequence[str], i: int, inline: bool) -> None:
    if not inline and i < len(tokens) and not tokens[i].startswith("-"):
        out.stray.setdefault(tokens[i], flag)


def _unknown_flag(flag: str, known: Sequence[str]) -> str:
    import difflib  # only for a typo: not a cost of every command

    close = difflib.get_close_matches(flag, [k for k in known if k.startswith("--")], n=1)
    if close:
        return f'Unknown flag "{flag}". Did you mean "{close[0]}"?'
    return f'Unknown flag "{flag}". Run --help to see the available flags.'
