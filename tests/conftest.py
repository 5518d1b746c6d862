"""Shared fixtures: build files in a temp dir, the CLI run in-process."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from zuke.cli import main

# The throwaway Postgres cluster (``pg_cluster``) for any test folder, and CI's no-skip rule;
# the hang watchdog (every thread's stack, then the process ends: CI fails instead of hanging);
# the folders ``-m`` rules out left uncollected (the README's inner loop), each checked marked.
pytest_plugins = ["tests.pg_fixtures", "tests.watchdog", "tests.marked_folders"]


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


CliRunner = Callable[..., CliResult]


class BuildWriter(Protocol):
    def __call__(self, source: str, name: str = "build.py") -> Path: ...


@pytest.fixture
def write_build(tmp_path: Path) -> BuildWriter:
    """Write ``source`` (dedented) as ``build.py`` in a temp dir and return its path."""

    def write(source: str, name: str = "build.py") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(source))
        return path

    return write


@pytest.fixture
def cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> CliRunner:
    """Run the zuke CLI in-process from the temp dir; capture its output and the bodies'."""
    monkeypatch.chdir(tmp_path)

    def run(*argv: str, env: dict[str, str] | None = None, **kwargs: object) -> CliResult:
        capsys.readouterr()
        code = main(list(argv), env=env or {}, **kwargs)  # type: ignore[arg-type]
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def names(seq: Sequence[object]) -> list[str]:
    return [str(x) for x in seq]
