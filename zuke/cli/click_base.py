"""The click classes of zuke's management commands: one help style, one usage error shape.

Every option's help ends the same way (``-h, --help  show this help``, the
words of ``zuke --help``), and a parse error is tied to its command so the
one ``zuke:`` line names ``zuke runs list --help``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import click

HELP_SETTINGS = {"help_option_names": ["-h", "--help"]}


@contextmanager
def _naming(ctx: click.Context) -> Iterator[None]:
    """Tie a parse error to its command, so the message names ``zuke runs list --help``."""
    try:
        yield
    except click.UsageError as exc:
        exc.ctx = exc.ctx or ctx  # click's parser raises "requires an argument" without it
        raise


HELP_TEXT = "show this help"  # the words every zuke help uses for -h, --help


class Command(click.Command):
    """A zuke command: its parse errors name the command, ``-h`` and ``--help`` both show
    its help, worded as every zuke help is (:class:`Group` inherits all three)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        with _naming(ctx):
            return super().parse_args(ctx, args)

    def get_help_option_names(self, ctx: click.Context) -> list[str]:
        return _names(self)

    def get_help_option(self, ctx: click.Context) -> click.Option | None:
        return _worded(super().get_help_option(ctx))


def _names(command: click.Command) -> list[str]:
    """``-h`` and ``--help`` whatever context asks first: click builds the help option once
    per command and keeps it, so a context without zuke's settings (a docs tool walking the
    tree) would otherwise leave ``--help`` alone for every later invocation."""
    taken = {name for param in command.params for name in (*param.opts, *param.secondary_opts)}
    return [name for name in HELP_SETTINGS["help_option_names"] if name not in taken]


def _worded(option: click.Option | None) -> click.Option | None:
    if option is not None:
        option.help = HELP_TEXT
    return option


class Group(Command, click.Group):
    """Lists its commands in the order they are defined; its commands are :class:`Command`
    (and it is one: the parsing and help rules are theirs)."""

    command_class = Command
    group_class = type  # subgroups are Group too

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Each command with its whole first sentence, wrapped: click would cut a summary to
        the width left beside the names ("refused while its holder's run...")."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=_WHOLE_SENTENCE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


#: a short help this long is never cut: the sentence is wrapped instead
_WHOLE_SENTENCE = 10_000


__all__ = ["HELP_SETTINGS", "HELP_TEXT", "Command", "Group"]
