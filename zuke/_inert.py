"""Untrusted text made inert where zuke writes it: the console, the job summary.

Comment bodies, deny and gate reasons, issue titles, logins, run and job names, signal data,
target names read from records and the error text of remote services reach zuke's output.
Each sink has its own dangers, so each has its own rule here, and the sinks apply them:

* **The console** (stdout, stderr). Under GitHub Actions the runner reads every line of a
  step's output: a line whose text, after leading whitespace, starts with ``::`` is a
  workflow command (``::add-mask::``, ``::set-output``, ``::stop-commands::``, ``::error``),
  ``##[`` anywhere in a line is the older form, and a CR ends a line as an LF does
  (actions/runner, ``src/Runner.Common/ActionCommand.cs``: ``TryParseV2`` trims the line and
  asks ``StartsWith("::")``; ``TryParse`` asks ``IndexOf("##[")``). Both comparisons are .NET's
  culture-sensitive ones, which skip ignorable characters (a soft hyphen, a zero-width space,
  a NUL), so the checks here skip them too. :func:`console_text` is for a value inside a line:
  its line breaks and other control characters become visible escapes (``\\n``, ``\\r``,
  ``\\u2028``), so it can never start a line of its own. :func:`console_line` is the last
  guard of every line a zuke command writes (:class:`zuke.cli.inert_stream.InertStream`):
  a line that would start a command has its first colon written ``\\u003a``, a ``##[`` has its
  bracket written ``\\u005b`` (valid inside a JSON string too, and the same value), and a line
  break that is not zuke's own ``\\n`` is escaped.
* **The job summary** (markdown with HTML, rendered by GitHub). :func:`summary_text`
  escapes HTML's characters as entities and every other ASCII punctuation mark with a
  backslash (CommonMark's escapes), so nothing renders: no tag, link, autolink, image,
  emphasis, heading or table cell break. :func:`summary_code` is a code span that is safe in
  a table cell, :func:`summary_code_block` a block its content cannot close. A link is only
  ever to a URL zuke built (:func:`summary_link` checks it is plain ``https://``, or
  ``http://`` to loopback). Redact a value *before* escaping it: escaping changes how a
  secret is spelled. :func:`summary_fit` keeps a step's summary under
  :data:`SUMMARY_CAP_BYTES` (GitHub drops one over 1 MiB whole).

Standard library only: the action's ``summary.py`` loads this file from its own checkout.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

#: C0 and C1 controls (tab too), DEL, bidi controls and the line and paragraph separators:
#: what a value shown on the console has escaped (a record cannot move the cursor, clear the
#: screen, retitle the terminal, reorder what is read or start a line)
_UNSAFE = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
#: what ends a line for a reader other than zuke's own ``\n``: CR (the runner), and what
#: Python's ``str.splitlines`` and log viewers also break on
_BREAKS = re.compile(r"[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
#: categories a culture-sensitive .NET comparison may skip (controls, format characters,
#: combining marks, unassigned): never allowed to hide a command's prefix
_IGNORABLE = frozenset(("Cc", "Cf", "Mn", "Me", "Cn"))
#: ASCII punctuation with a meaning in HTML: written as entities in the summary
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
_PUNCTUATION = frozenset("!#$%()*+,-./:;=?@[\\]^_`{|}~")
#: what a summary shows for a control character (never the character itself)
_REPLACEMENT = "\ufffd"
#: a URL zuke built: https (plain http only to loopback: a test's GitHub), URL-safe characters
_SAFE_URL = re.compile(
    r"(?:https://[A-Za-z0-9.-]+|http://(?:127\.0\.0\.1|localhost))(?::[0-9]{1,5})?"
    r"(?:/[A-Za-z0-9._~%/#=?&+-]*)?"
)


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def console_text(value: object, *, tabs: bool = True) -> str:
    """``value`` as text that stays inside its line: CR, LF, U+2028/9, the other C0 and C1
    controls and bidi controls escaped (``\\n``, ``\\x1b``, ``\\u202e``); a tab is kept unless
    ``tabs`` is false (a table's columns)."""
    text = str(value)
    if text.isprintable():  # the usual value: every character _UNSAFE matches is unprintable
        return text
    if tabs:
        return _UNSAFE.sub(lambda m: "\t" if m.group() == "\t" else _escape(m), text)
    return _UNSAFE.sub(_escape, text)


def _ignorable(char: str) -> bool:
    return unicodedata.category(char) in _IGNORABLE


def command_may_start(text: str) -> bool:
    """Whether more text after ``text`` (the start of a line) could still make it a
    workflow command: it is blank or ignorable so far, but for one colon."""
    seen = [c for c in text if not (c.isspace() or _ignorable(c))]
    return seen in ([], [":"])


def trailing_hashes(text: str) -> int:
    """Where a ``#`` or ``##`` at the end of ``text`` (ignorable characters between and after
    them allowed) starts, that a ``[`` written next would make ``##[``; ``len(text)`` if none."""
    i, start, hashes = len(text) - 1, len(text), 0
    while i >= 0 and hashes < 2:
        if text[i] == "#":
            hashes, start = hashes + 1, i
        elif not _ignorable(text[i]):
            break
        i -= 1
    return start


def _command_start(line: str) -> int | None:
    """Where the ``::`` of a line that would be a workflow command starts, or ``None``."""
    lead = line.lstrip()[:1]
    if not lead or (lead != ":" and lead.isascii() and lead.isprintable()):
        return None  # the usual line: it starts with a visible character that is no colon
    first = None
    for i, char in enumerate(line):
        if _ignorable(char) or (first is None and char.isspace()):
            continue
        if char != ":":
            return None
        if first is not None:
            return first
        first = i
    return None


def _old_command_brackets(line: str) -> list[int]:
    """The ``[`` of each ``##[`` in ``line`` (ignorable characters between them skipped)."""
    found = []
    start = line.find("[")
    while start != -1:
        i, hashes = start - 1, 0
        while i >= 0 and hashes < 2:
            if line[i] == "#":
                hashes += 1
            elif not _ignorable(line[i]):
                break
            i -= 1
        if hashes == 2:
            found.append(start)
        start = line.find("[", start + 1)
    return found


def console_line(line: str, *, breaks: bool = True, continues: bool = False) -> str:
    """One line (no ``\\n``) as the console may show it under a runner: a leading ``::``
    (after whitespace) has its first colon written ``\\u003a``; each ``##[`` its bracket
    ``\\u005b``; other line breaks (CR, U+2028…) escaped unless ``breaks`` is false (a
    terminal, where a live display draws with CR). ``continues``: ``line`` is the rest of a
    line whose start was already written (and checked)."""
    if breaks and not line.isprintable() and _BREAKS.search(line):  # each break is unprintable
        line = _BREAKS.sub(_escape, line)
    if "[" in line and "#" in line:
        for at in reversed(_old_command_brackets(line)):
            line = f"{line[:at]}\\u005b{line[at + 1 :]}"
    start = _command_start(line) if ":" in line and not continues else None
    if start is not None:
        line = f"{line[:start]}\\u003a{line[start + 1 :]}"
    return line


def console_lines(text: str, *, breaks: bool = True) -> str:
    """:func:`console_line` for each ``\\n``-separated line of ``text``."""
    return "\n".join(console_line(line, breaks=breaks) for line in text.split("\n"))


def summary_text(value: object, *, limit: int | None = None) -> str:
    """``value`` as markdown text that renders as itself: line breaks become spaces, other
    controls and bidi marks U+FFFD, HTML's characters entities, every other ASCII punctuation
    mark backslash-escaped (CommonMark), so no tag, link, autolink, image, emphasis or table
    break survives. ``limit`` cuts the text (before escaping) with an ellipsis."""
    text = _plain(str(value))
    if limit is not None and len(text) > limit:
        text = text[: max(limit - 1, 0)] + "…"
    out = []
    for char in text:
        if char in _ENTITIES:
            out.append(_ENTITIES[char])
        elif char in _PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def _plain(text: str) -> str:
    text = _BREAKS.sub(" ", text.replace("\r\n", " ").replace("\n", " "))
    return _UNSAFE.sub(lambda m: " " if m.group() == "\t" else _REPLACEMENT, text)


def summary_code(value: object, *, cell: bool = True) -> str:
    """``value`` as a markdown code span: nothing inside renders; a backtick becomes ``'``,
    line breaks spaces, controls U+FFFD, and in a table cell (``cell``) a ``|`` is ``\\|``
    (GitHub's tables split cells before code spans are read)."""
    text = _plain(str(value)).replace("`", "'") or " "
    if cell:
        text = text.replace("|", "\\|")
    return f"`{text}`"


def summary_code_block(lines: list[str]) -> list[str]:
    """``lines`` as a fenced code block whose fence is longer than any run of backticks in
    them (CommonMark: a shorter one cannot close it); controls are U+FFFD."""
    shown = [_plain(line) for line in lines]
    longest = max((len(run) for line in shown for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *shown, fence]


#: GitHub drops a step's whole summary when it passes 1 MiB (docs.github.com, "Workflow commands
#: for GitHub Actions": Adding a job summary); zuke stops adding to one well below that
SUMMARY_CAP_BYTES = 900 * 1024


def summary_fit(head: str, rows: Sequence[str], room: int, more: Callable[[int], str]) -> str:
    """``head`` and as many of ``rows`` as fit in ``room`` bytes (UTF-8), in order, then
    ``more(n)`` for the ``n`` rows left out; ``""`` if not even ``head`` and that line fit."""
    size = _utf8(head)
    if size + sum(_utf8(row) for row in rows) <= room:
        return head + "".join(rows)
    reserve = _utf8(more(len(rows)))  # the longest the closing line can be
    if size + reserve > room:
        return ""
    kept = [head]
    for row in rows:
        if size + _utf8(row) + reserve > room:
            break
        kept.append(row)
        size += _utf8(row)
    return "".join(kept) + more(len(rows) - (len(kept) - 1))


def _utf8(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def summary_link(text: str, url: str) -> str:
    """A markdown link to ``url``, a URL zuke built (``https://``, or ``http://`` to loopback,
    and URL-safe characters only, checked: anything else is the plain ``text``); ``text`` is
    escaped."""
    if not _SAFE_URL.fullmatch(url):
        return summary_text(text)
    return f"[{summary_text(text)}](<{url}>)"


__all__ = [
    "SUMMARY_CAP_BYTES",
    "command_may_start",
    "console_line",
    "console_lines",
    "console_text",
    "summary_code",
    "summary_code_block",
    "summary_fit",
    "summary_link",
    "summary_text",
    "trailing_hashes",
]
