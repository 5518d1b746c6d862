"""Text zuke accepts from a user: no lone surrogate, checked where the text comes in.

A lone surrogate (``"\\ud800"``: half of a UTF-16 pair, which JSON's ``\\u``
escapes and Python strings can carry) is not a character: no UTF-8 encodes it,
so a record holding one cannot be printed, written as UTF-8 or stored in
Postgres ``text`` without an escape of our own. It is refused at every input —
``zuke resume --data``, a parameter's value, ``ctx.state.set``, an MCP tool's
arguments, a body sent to ``zuke serve`` — with one line naming where it was,
before anything is stored. :func:`check_text` walks parsed values (mappings,
sequences, their keys too) iteratively; a record that already holds one (written
by an older zuke) still reads and prints.
"""

from __future__ import annotations

from zuke._errors import UsageError, ZukeError


def lone_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate (what UTF-8 cannot encode)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def has_lone_surrogate(value: object) -> bool:
    """Whether any string in ``value`` (keys included, however deep) holds one."""
    stack: list[object] = [value]
    seen = 0
    while stack:
        item = stack.pop()
        seen += 1
        if seen > 1_000_000:  # a value that contains itself: its strings were all seen
            return False
        if isinstance(item, str):
            if lone_surrogate(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
    return False


def check_text(value: object, *, what: str, error: type[ZukeError] = UsageError) -> None:
    """Raise ``error`` (one line naming ``what``) if ``value`` holds a lone surrogate."""
    if has_lone_surrogate(value):
        raise error(
            f"{what} holds a lone surrogate (a \\ud800-\\udfff escape without its pair), "
            "which is not a character: send the text as UTF-8"
        )


__all__ = ["check_text", "has_lone_surrogate", "lone_surrogate"]
