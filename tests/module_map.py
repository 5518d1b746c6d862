"""The module table of ``docs/architecture.md``, made from the modules themselves.

One line a module: its path and the first paragraph of its docstring (the detail stays in
the docstring, where it is kept true with the code). ``python -m tests.module_map`` rewrites
the table between the two markers; ``tests/test_architecture.py`` checks that it is current.
"""

from __future__ import annotations

import ast
import inspect
import sys
import tokenize
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- module map: made by `python -m tests.module_map`, do not edit by hand -->"
END = "<!-- end of the module map -->"
PACKAGES = ("zuke", "zuke_gh")
#: the longest summary a row shows before it is cut at a word (the docstring has the rest)
MAX_SUMMARY = 240


@cache
def docstring(path: Path) -> str:
    """The module's docstring as :func:`ast.get_docstring` gives it, read from the file's first
    tokens: parsing each of ~240 modules whole for it was most of the map's cost (about 1 s
    each time, and each test of it in each xdist worker paid it: issue 28 §7). Anything but a
    lone plain string statement first is left to the parser."""
    with tokenize.open(path) as source:
        tokens = tokenize.generate_tokens(source.readline)
        skip = (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING)
        first = next((t for t in tokens if t.type not in skip), None)
        after = next((t for t in tokens if t.type not in skip), None)
    if (
        first is not None
        and first.type == tokenize.STRING
        and after is not None
        and after.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
        and not first.string.lstrip("rRuU").startswith(("f", "F", "b", "B"))
    ):
        value = ast.literal_eval(first.string)
        return inspect.cleandoc(value) if isinstance(value, str) else ""
    return ast.get_docstring(ast.parse(path.read_text(), filename=str(path))) or ""


def summary(path: Path) -> str:
    """The module docstring's first paragraph on one line, cut at a word if long."""
    doc = docstring(path)
    first = " ".join(doc.strip().split("\n\n")[0].split())
    if len(first) > MAX_SUMMARY:
        first = first[:MAX_SUMMARY].rsplit(" ", 1)[0].rstrip(",;:—-") + " …"
    return first.replace("|", "\\|")


def modules() -> list[Path]:
    """Every module of the packages, a package's ``__init__`` ahead of its modules."""
    found = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    return sorted(
        found, key=lambda p: (p.parent.relative_to(ROOT).parts, p.name != "__init__.py", p.name)
    )


def table() -> str:
    """The table: a heading row per package folder, then a row per module."""
    lines = [BEGIN]
    folder = None
    for path in modules():
        rel = path.relative_to(ROOT)
        if rel.parent != folder:
            folder = rel.parent
            lines += ["", f"### `{folder.as_posix()}/`", "", "| module | owns |", "| --- | --- |"]
        lines.append(f"| `{rel.name}` | {summary(path) or '(no docstring)'} |")
    lines += ["", END]
    return "\n".join(lines)


def current() -> str:
    """The table as the document has it now (empty if the markers are missing)."""
    text = DOC.read_text()
    start, end = text.find(BEGIN), text.find(END)
    return "" if start < 0 or end < 0 else text[start : end + len(END)]


def write() -> None:
    text = DOC.read_text()
    old = current()
    if not old:
        raise SystemExit(f"{DOC}: the module map's markers are missing")
    DOC.write_text(text.replace(old, table()))


if __name__ == "__main__":
    write()
    sys.exit(0)
