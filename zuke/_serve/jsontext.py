"""JSON in and out of ``zuke serve``: strict parsing, text that always encodes.

Two rules, written once so every resource obeys them:

* **What is JSON.** A body must be RFC 8259 JSON. Python's parser also takes
  ``NaN`` and ``Infinity`` and turns ``1e999`` into infinity; none of those is
  a JSON value, so they are refused (400), never stored.
* **Any JSON string round-trips.** ``"\\ud800"`` (a lone surrogate) is a valid
  JSON escape that the TypeScript client sends, but a Python string holding it
  cannot be encoded as UTF-8 — neither into SQLite nor onto the wire. Text is
  therefore dumped without escapes when it encodes and with ``\\uXXXX`` escapes
  when it does not: the same JSON value either way. Summary columns (free
  strings such as ``actor``) go into SQLite as text, or as their
  ``surrogatepass`` bytes when they would not encode, and come back exactly.
"""

from __future__ import annotations

import json
import math
from typing import Any


class NotJsonError(ValueError):
    """A body that is not JSON; the message says why, without quoting the body."""


def _refuse_constant(name: str) -> Any:
    raise NotJsonError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NotJsonError("a number too large for a double is not accepted")
    return value


def loads(data: bytes | str) -> Any:
    """Parse a request body; :class:`NotJsonError` unless it is JSON proper."""
    try:
        return json.loads(data, parse_constant=_refuse_constant, parse_float=_finite_float)
    except NotJsonError as exc:
        raise NotJsonError(f"body is not valid JSON: {exc}") from None
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        raise NotJsonError("body is not valid JSON") from None


def dumps(raw: Any) -> str:
    """Compact JSON text for ``raw`` that is always encodable as UTF-8."""
    text = json.dumps(raw, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:  # a lone surrogate: escape it (and the rest)
            text = json.dumps(raw, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def encode(raw: Any) -> bytes:
    """:func:`dumps` as UTF-8 bytes, for a response body."""
    return dumps(raw).encode()


def sql_text(value: str) -> str | bytes:
    """``value`` as SQLite can store it: itself, or its bytes if it holds a lone surrogate."""
    if value.isascii():
        return value
    try:
        value.encode()
    except UnicodeEncodeError:
        return value.encode("utf-8", "surrogatepass")
    return value


def from_sql(value: str | bytes) -> str:
    """The string :func:`sql_text` stored."""
    return value if isinstance(value, str) else value.decode("utf-8", "surrogatepass")


__all__ = ["NotJsonError", "dumps", "encode", "from_sql", "loads", "sql_text"]
