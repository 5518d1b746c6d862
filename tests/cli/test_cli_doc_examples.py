"""Issue 19 §3 item 8: the command lines ``docs/cli.md`` shows work on its own page's build
(the first build of ``docs/authoring.md``): each exits 0, or — where the page shows the
``zuke:`` line it prints — fails with exactly that line."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import CliRunner

DOCS = Path(__file__).resolve().parents[2] / "docs"
#: a synopsis, not a command: placeholders, alternatives, ellipses
SYNOPSIS = re.compile(r"[\[\]|…]|RUN_ID|\bKEY\b|TARGET|PARAM")


def first_build() -> str:
    text = (DOCS / "authoring.md").read_text()
    section = text[text.index("## A first build") :]
    return section.split("```python\n", 1)[1].split("\n```", 1)[0]


def examples() -> list[tuple[str, str | None]]:
    """Each ``zuke …`` line of a code block in cli.md, and the ``zuke:`` line shown after it."""
    found: list[tuple[str, str | None]] = []
    blocks = re.findall(r"```[a-z]*\n(.*?)```", (DOCS / "cli.md").read_text(), re.S)
    for block in blocks:
        lines = block.splitlines()
        for i, line in enumerate(lines):
            command = line.removeprefix("$ ").split("  #")[0].strip()
            words = command.split()
            at = next((n for n, w in enumerate(words) if w == "zuke"), None)
            if at is None or any("=" not in w for w in words[:at]) or SYNOPSIS.search(command):
                continue
            after = lines[i + 1] if i + 1 < len(lines) else ""
            shown = after if after.startswith("zuke: ") else None
            if shown is not None and "loading build.py failed" in shown:
                continue  # the broken-build section: another build
            found.append((command, shown))
    return found


@pytest.mark.parametrize(("command", "shown"), examples(), ids=lambda v: v or "")
def test_a_cli_md_example_works_on_the_pages_build(
    tmp_path: Path, cli: CliRunner, command: str, shown: str | None
) -> None:
    source = first_build()
    (tmp_path / "build.py").write_text(source)
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "release.py").write_text(source)
    words = shlex.split(command)
    at = words.index("zuke")
    env = dict(w.split("=", 1) for w in words[:at])
    result = cli(*words[at + 1 :], env=env)
    if shown is None:
        assert result.code == 0, result.text
    else:
        assert result.code != 0 and result.err.splitlines() == [shown]


def test_the_examples_include_the_skip_example() -> None:
    assert ("zuke publish --service api --skip test", None) in examples()
