"""How deeply JSON from a user may nest: one limit, checked where the JSON comes in.

Python's ``json`` recurses once per level, both to parse and to encode. A
payload of a few KiB of brackets nested about a thousand deep parses, then
fails to encode when a store writes the record holding it: a RecursionError
instead of an answer, mid-write. So JSON a user hands zuke (a signal's
``--data``; a library or MCP caller's signal data) is refused beyond
:data:`MAX_JSON_DEPTH` before anything is written, and what is accepted can
always be stored and read back, with room to spare for the record around it.

Both checks are iterative (no recursion) and bounded: the text scan is linear
in the text, the value walk stops as soon as it is past the limit, so a value
that contains itself is refused rather than walked for ever.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from zuke._errors import UsageError, ZukeError

#: The deepest nesting accepted (a container inside a container ... counts one level each).
MAX_JSON_DEPTH = 64

# A JSON string literal (the unrolled form: linear, no backtracking blow-up).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


def json_text_depth(text: str) -> int:
    """The deepest nesting of ``[`` and ``{`` in JSON ``text``; brackets in strings don't count.

    Meant to run before ``json.loads`` (which would recurse); invalid JSON gets
    some number, and the parse that follows reports what is wrong with it.
    """
    depth = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub("", text)):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _deeper_than(value: object, limit: int) -> bool:
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[object]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((c, depth + 1) for c in children if isinstance(c, (dict, list, tuple)))
    return False


def _message(what: str, limit: int) -> str:
    return (
        f"{what} is nested too deep: the limit is {limit} levels of arrays and objects. "
        "Send a flatter payload or a reference (a URL, an id) instead"
    )


def check_json_depth(
    value: object,
    *,
    limit: int = MAX_JSON_DEPTH,
    what: str = "the JSON",
    error: type[ZukeError] = UsageError,
) -> None:
    """Raise ``error`` (one line naming ``what`` and ``limit``) if ``value`` nests too deep.

    ``value`` is already parsed (dicts, lists, tuples, scalars). The CLI raises
    a :class:`~zuke.UsageError` (exit 2); a run-management call passes
    :class:`~zuke.SignalRefusedError`.
    """
    if _deeper_than(value, limit):
        raise error(_message(what, limit))


def check_json_text_depth(
    text: str,
    *,
    limit: int = MAX_JSON_DEPTH,
    what: str = "the JSON",
    error: type[ZukeError] = UsageError,
) -> None:
    """:func:`check_json_depth` for JSON text, before it is parsed."""
    if json_text_depth(text) > limit:
        raise error(_message(what, limit))
