"""``zuke.run(Build)``: ``python build.py ...`` runs the ``zuke`` CLI for that build.

A wrapper of its own so that ``import zuke`` never imports :mod:`zuke.cli`:
the library layers (state → engine → runs) sit below the CLI, and the CLI is
loaded only when a build file actually hands control to it.
"""

from __future__ import annotations

from collections.abc import Sequence

from zuke._build import Build


def run(build: type[Build], argv: Sequence[str] | None = None) -> None:
    """``python build.py ...``: the same CLI for this build class, then exit."""
    from zuke.cli import run as run_cli  # the CLI loads only when it is used

    run_cli(build, argv)


__all__ = ["run"]
