"""Issue 19 §3 item 4: a bare word after a flag that takes its value only as ``--flag=value``
(``--parallel 4``, a boolean parameter's ``--dry-run false``) is a target; the unknown-target
message says why and how to write it."""

from __future__ import annotations

import pytest

from tests.conftest import BuildWriter, CliRunner

BUILD = """
    from zuke import Build, parameter, target

    class App(Build):
        dry_run = parameter("rehearse only").boolean().default(False)

        @target
        def hello(self, t):
            return t.executes(lambda: print("HELLO", self.dry_run.value))
"""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (("hello", "--parallel", "4"),
         "zuke: Unknown target: 4. --parallel takes its number only as --parallel=4: "
         "a bare word after it is a target.\n"),
        (("hello", "--dry-run", "false"),
         "zuke: Unknown target: false. --dry-run takes a value only as --dry-run=false: "
         "a bare word after it is a target.\n"),
    ],
)  # fmt: skip
def test_a_bare_word_after_an_equals_only_flag_gets_the_equals_hint(
    write_build: BuildWriter, cli: CliRunner, argv: tuple[str, ...], line: str
) -> None:
    write_build(BUILD)
    result = cli(*argv)
    assert (result.code, result.err) == (2, line)
    assert "HELLO" not in result.out  # nothing ran


def test_the_equals_forms_run(write_build: BuildWriter, cli: CliRunner) -> None:
    write_build(BUILD)
    result = cli("hello", "--parallel=4", "--dry-run=false")
    assert result.code == 0 and "HELLO False" in result.out


def test_an_unknown_target_elsewhere_keeps_its_own_hint(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(BUILD)
    result = cli("helo", "--parallel=2")
    assert result.err == 'zuke: Unknown target: helo. Did you mean "hello"?\n'
