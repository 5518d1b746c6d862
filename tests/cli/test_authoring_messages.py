"""Issue 19 §3 item 8: what ``docs/authoring.md`` promises for a realistic typo in a definition
(``self.compiel``, ``self.elsewhere``) is what zuke prints: the attribute, its line, the
targets it may have meant; and the page no longer calls ``ctx.signals`` empty."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import BuildWriter, CliRunner

DOCS = Path(__file__).resolve().parents[2] / "docs"


def first_build_with(old: str, new: str) -> str:
    text = (DOCS / "authoring.md").read_text()
    source = text[text.index("## A first build") :].split("```python\n", 1)[1].split("\n```")[0]
    assert old in source
    return source.replace(old, new)


def test_a_typo_in_a_reference_is_the_message_the_page_promises(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    path = write_build(first_build_with("depends_on(self.compile)", "depends_on(self.compiel)"))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if "compiel" in text)
    result = cli("publish", "--service", "api")
    message = (
        f"zuke: target 'test': self.compiel is not a target or attribute of Release "
        f"(line {line}); did you mean self.compile?"
    )
    assert (result.code, result.err) == (2, message + "\n")
    assert (
        message.removeprefix("zuke: ").replace(f"line {line}", "line 20")
        in (DOCS / "authoring.md").read_text()
    )


def test_a_name_with_nothing_close_lists_the_targets(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(first_build_with("depends_on(self.compile)", "depends_on(self.elsewhere)"))
    result = cli("publish", "--service", "api")
    assert result.code == 2
    assert result.err.startswith("zuke: target 'test': self.elsewhere is not a target or attr")
    assert result.err.endswith("; its targets are compile, test, publish\n")


def test_an_attribute_error_inside_a_helper_is_not_taken_for_a_typo(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(first_build_with('print(f"compiling', 'None.nope\n        print(f"compiling'))
    result = cli("compile", "--service", "api")
    assert result.code == 1 and "AttributeError" in result.text  # the body's own error


def test_the_page_no_longer_says_ctx_signals_is_empty_in_this_version() -> None:
    text = (DOCS / "authoring.md").read_text()
    assert "empty in this version" not in text
    assert 'ctx.signals["approved"].data' in text
