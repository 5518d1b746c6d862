"""The rules that make untrusted text inert (zuke/_inert.py), and the stream that applies
them to every line a command writes (zuke/cli/inert_stream.py).

A runner takes a line as a workflow command when, after .NET's ``TrimStart()``, it starts
with ``::``, or when it holds ``##[`` anywhere; both comparisons are culture-sensitive and
skip ignorable characters (actions/runner ``src/Runner.Common/ActionCommand.cs``).
:func:`runner_reads_a_command` is that reading, as strictly as we can model it.
"""

from __future__ import annotations

import html
import io
import json
import re
import unicodedata

import pytest
from markdown_it import MarkdownIt

from zuke._inert import (
    console_line,
    console_lines,
    console_text,
    summary_code,
    summary_code_block,
    summary_fit,
    summary_link,
    summary_text,
)
from zuke.cli.inert_stream import InertStream

#: a /deny reason as a hostile commenter would write it
HOSTILE = (
    "not today\n::add-mask::s3cr3t\n  ::set-output name=status::approved\n"
    "::stop-commands::pause\r::error file=x::owned\u2028::warning::sep\u2029::notice::para\n"
    "\t::debug::tabbed\n\u00ad::error::soft-hyphen\n:\u200b:error::zero-width\n"
    "ok ##[error]old-style ##\u00ad[group]split\n"
    "<img src=x onerror=alert(1)> <script>x</script> [click](https://evil.example) "
    "![pic](https://evil.example/p.png) *bold* _it_ | cell | www.evil.example evil@evil.example"
)


#: what a culture-sensitive .NET comparison may skip: controls, format characters, marks
IGNORABLE = ("Cc", "Cf", "Mn", "Me", "Cn")


def runner_reads_a_command(line: str) -> bool:
    """Whether the runner could read ``line`` as a workflow command: ``::`` first after the
    whitespace it trims, or ``##[`` anywhere, ignorable characters skipped in both."""
    visible = "".join(c for c in line if unicodedata.category(c) not in IGNORABLE)
    return visible.lstrip().startswith("::") or "##[" in visible


def runner_lines(text: str) -> list[str]:
    """``text`` split as the runner reads a step's output (CR, LF and CRLF end a line)."""
    return text.replace("\r\n", "\n").replace("\r", "\n").split("\n")


@pytest.mark.parametrize(
    "line",
    [
        "::add-mask::s3cr3t",
        "  \t::set-output name=x::y",
        "\u00ad::error::soft hyphen first",
        ":\u200b:error::a zero-width space between",
        "\x00::error::a NUL first",
        "\u3000::error::an ideographic space first",
        "text ##[error]anywhere",
        "#\u00ad#[group]with an ignorable between",
        "##\u200b[endgroup]",
        "x\r::error::after a CR",
        "x\u2028::error::after a line separator",
    ],
)
def test_no_line_the_console_guard_lets_through_is_a_workflow_command(line: str) -> None:
    shown = console_line(line)
    assert all(not runner_reads_a_command(part) for part in runner_lines(shown)), shown
    assert runner_reads_a_command(line) or "\r" in line or "\u2028" in line  # the case is real


def test_the_guard_escapes_visibly_and_leaves_ordinary_lines_alone() -> None:
    assert console_line("::add-mask::x") == "\\u003a:add-mask::x"
    assert console_line("  ::error::x") == "  \\u003a:error::x"
    assert console_line("a ##[error]b") == "a ##\\u005berror]b"
    assert console_line("a\rb\u2028c") == "a\\rb\\u2028c"
    for plain in ("✔ compile succeeded in 3ms", "r-1 Release [qa]: resumed → succeeded",
                  "ok ::set-output in the middle", ": not a command", "# [a heading]"):  # fmt: skip
        assert console_line(plain) == plain


def test_json_stays_the_same_value_through_the_guard() -> None:
    value = {"detail": "x ##[error]y\n::add-mask::z", "ok": True, "list": [1, 2]}
    for text in (json.dumps(value, indent=2), json.dumps(value, separators=(",", ":"))):
        guarded = console_lines(text)
        assert json.loads(guarded) == value
        assert not any(runner_reads_a_command(line) for line in runner_lines(guarded))


def test_a_value_never_starts_a_line_of_its_own() -> None:
    text = console_text(HOSTILE)
    assert "\n" not in text and "\r" not in text and "\u2028" not in text
    assert "\\n::add-mask::s3cr3t" in text and "\\r::error" in text and "\\u2028" in text
    assert "\t::debug" in text  # a tab is kept (it ends no line)
    assert console_text("a\tb", tabs=False) == "a\\tb"
    assert console_text("\x1b[2J\u202e") == "\\x1b[2J\\u202e"


def test_the_stream_guards_lines_split_across_writes() -> None:
    raw = io.StringIO()
    stream = InertStream(raw)
    for chunk in ("ok\n  :", "", ":add-mask::x\nab #", "#[error]y\n", "\u00ad", ":", ":z"):
        stream.write(chunk)
        stream.flush()
    stream.finish()
    lines = raw.getvalue().split("\n")
    assert lines == ["ok", "  \\u003a:add-mask::x", "ab ##\\u005berror]y", "\u00ad\\u003a:z"]


def test_the_stream_writes_what_is_decided_of_an_unfinished_line_on_flush() -> None:
    raw = io.StringIO()
    stream = InertStream(raw)
    stream.write("Sweeping 3/5 #")
    stream.flush()
    assert raw.getvalue() == "Sweeping 3/5 "  # the "#" waits: a "[" next would make "##["
    stream.write("#[x]\n")
    assert raw.getvalue() == "Sweeping 3/5 ##\\u005bx]\n"


def test_on_a_terminal_the_stream_leaves_a_cr_to_the_live_display() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    raw = Terminal()
    stream = InertStream(raw)
    stream.write("\r\x1b[2K3/5 done\n::add-mask::x\n")
    assert raw.getvalue() == "\r\x1b[2K3/5 done\n\\u003a:add-mask::x\n"
    assert stream.isatty()


# ---------------------------------------------------------------- the job summary


def render(markdown: str) -> str:
    """Markdown as HTML: CommonMark with GitHub's tables (markdown-it-py; GitHub's autolinks
    are checked apart, by what starts them)."""
    return str(MarkdownIt("commonmark").enable("table").render(markdown))


def test_summary_text_renders_as_itself_with_no_tag_link_image_or_emphasis() -> None:
    cell = summary_text(HOSTILE)
    page = render(f"| a | b |\n|---|---|\n| {cell} | end |\n")
    for made in ("<img", "<script", "<a ", "<em>", "<strong>", "<code>"):
        assert made not in page, page
    assert page.count("<td>") == 2  # the reason's "|" did not break the row
    shown = html.unescape(page.split("<td>")[1].split("</td>")[0])
    for said in ("not today ::add-mask::s3cr3t", "<img src=x onerror=alert(1)>",
                 "[click](https://evil.example)", "![pic](", "*bold* _it_ | cell |",
                 "www.evil.example evil@evil.example"):  # fmt: skip
        assert said in shown, shown  # what was written, as text


@pytest.mark.parametrize("url", ["https://evil.example/x", "www.evil.example", "a@evil.example"])
def test_nothing_in_summary_text_can_become_an_autolink(url: str) -> None:
    text = summary_text(f"see {url} now")
    # GitHub's autolink extension starts at an unescaped ":", "@" or "www." in the source
    assert not re.search(r"(?<!\\)[:@.]", text), text


def test_a_code_span_keeps_its_text_and_its_table_cell() -> None:
    page = render(f"| a | b |\n|---|---|\n| {summary_code('x`y|z<b>')} | end |\n")
    assert page.count("<td>") == 2 and "<code>x'y|z&lt;b&gt;</code>" in page
    assert summary_code("a|b", cell=False) == "`a|b`"


def test_a_code_block_cannot_be_closed_by_its_content() -> None:
    block = summary_code_block(["zuke resume r1 --signal ```", "````", "<b>x</b>"])
    page = render("\n".join(block) + "\n\nafter\n")
    assert page.count("<pre>") == 1 and "<p>after</p>" in page and "<b>" not in page


def test_a_link_is_only_to_a_plain_https_url() -> None:
    assert summary_link("link", "https://github.com/acme/app/issues/7") == (
        "[link](<https://github.com/acme/app/issues/7>)"
    )
    for bad in ("javascript:alert(1)", "http://github.com/x", "https://x/a b", "https://x/>"):
        assert summary_link("link", bad) == "link"


def test_fitting_keeps_whole_rows_and_says_how_many_are_left_out() -> None:
    rows = [f"| r{i} |\n" for i in range(10)]
    text = summary_fit("head\n", rows, 40, lambda n: f"{n} more\n")
    assert text == "head\n| r0 |\n| r1 |\n| r2 |\n7 more\n" and len(text.encode()) <= 40
    assert summary_fit("head\n", rows, 1000, lambda n: "") == "head\n" + "".join(rows)
    assert summary_fit("head\n", rows, 5, lambda n: f"{n} more\n") == ""


def test_every_character_made_inert_is_unprintable_so_a_printable_line_passes_as_it_is() -> None:
    """``console_text`` and ``console_line`` skip their searches for a line Python calls
    printable (issue 28 §1: two lines a target); that is only sound while every character
    ``_UNSAFE`` or ``_BREAKS`` matches is unprintable. Checked over all of Unicode."""
    from zuke._inert import _BREAKS, _UNSAFE

    for code in range(0x110000):
        char = chr(code)
        if _UNSAFE.match(char) or _BREAKS.match(char):
            assert not char.isprintable(), hex(code)
    assert console_text("══ deploy-prod ══") == "══ deploy-prod ══"
    assert console_text("a\u202eb") == "a\\u202eb"
    assert console_line("✔ a\u2028b succeeded") == "✔ a\\u2028b succeeded"
