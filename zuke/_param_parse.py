"""Parsing a parameter's text into its value, and checking a declared default.

One grammar for numbers, shared in spirit with durations (:mod:`zuke._duration`):
ASCII digits only, no ``_`` separators, no other script's digits (``float()``
and ``int()`` accept ``"1_000"`` and ``"٣"``; zuke does not). Options are checked
against exactly the value the body receives. Secret values are never quoted in
a message, and a secret shorter than :data:`~zuke._redact.MIN_SECRET_LENGTH` is
refused (see :mod:`zuke._redact` for why).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any, Protocol

from zuke._redact import MIN_SECRET_LENGTH


class ParamShape(Protocol):
    """What parsing reads of a declared parameter (:class:`zuke._params.Parameter` is one):
    a protocol, so this module needs nothing of the module that imports it."""

    @property
    def kind(self) -> str: ...
    @property
    def choices(self) -> tuple[str, ...]: ...
    @property
    def default_value(self) -> Any: ...
    @property
    def is_array(self) -> bool: ...
    @property
    def is_secret(self) -> bool: ...
    @property
    def flag(self) -> str: ...
    @property
    def kind_label(self) -> str: ...


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


#: The one number grammar (durations use the same digits): ASCII digits only,
#: no ``_`` separators, a fraction needs digits on both sides of the point.
_INTEGER = re.compile(r"[+-]?[0-9]+")
_NUMBER = re.compile(r"[+-]?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _parse_number(text: str, shown: str) -> float:
    if not _NUMBER.fullmatch(text):
        try:
            loose = float(text)
        except ValueError:
            loose = 0.0
        if not math.isfinite(loose):
            raise ValueError(f"expected a finite number, got {shown}")
        raise ValueError(f"expected a number, got {shown}")
    number = float(text)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {shown}")
    return number


def _parse_scalar(p: ParamShape, text: str) -> Any:
    shown = "(hidden)" if p.is_secret else repr(text)
    value: Any
    if p.kind == "number":
        value = _parse_number(text, shown)
    elif p.kind == "integer":
        if not _INTEGER.fullmatch(text):
            raise ValueError(f"expected an integer, got {shown}")
        value = int(text, 10)
    elif p.kind == "boolean":
        lowered = text.lower()
        if lowered in _TRUE:
            value = True
        elif lowered in _FALSE:
            value = False
        else:
            raise ValueError(f"expected true/false (or yes/no, 1/0), got {shown}")
    else:
        value = text
    # The options check sees exactly the value the body will get.
    if p.choices and not _is_choice(p, value):
        raise ValueError(f"expected one of {', '.join(p.choices)}, got {shown}")
    return value


def _is_choice(p: ParamShape, value: object) -> bool:
    if p.kind in ("number", "integer") and not isinstance(value, bool):
        return any(_NUMBER.fullmatch(c) and float(c) == value for c in p.choices)
    return str(value) in p.choices


def _fits(p: ParamShape, value: object) -> bool:
    if p.kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif p.kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif p.kind == "boolean":
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    return ok and (not p.choices or _is_choice(p, value))


def secret_forms(value: object) -> list[str]:
    """Every spelling of a secret value that can reach output (each element of a list)."""
    if value is None or value is UNSET:
        return []
    if isinstance(value, list):
        return [form for item in value for form in secret_forms(item)]
    forms = [str(value)]
    if isinstance(value, float) and value.is_integer():
        forms.append(str(int(value)))
    return forms


def short_secret(p: ParamShape, forms: Sequence[str]) -> str | None:
    if any(len(f) < MIN_SECRET_LENGTH for f in forms):
        return (
            f"{p.flag}: a secret must be at least {MIN_SECRET_LENGTH} characters long "
            "(a shorter one cannot be masked without garbling output and revealing it)"
        )
    return None


def default_problem(p: ParamShape) -> str | None:
    """Why ``p``'s default does not fit its kind or options, or ``None`` if it does."""
    if p.is_secret and p.kind == "boolean":
        return "a boolean cannot be a secret (its value is one of a few words); drop .secret()"
    value = p.default_value
    if value is UNSET or (value is None and not p.is_array):
        return None
    values = value if p.is_array and isinstance(value, list) else [value]
    if p.is_array and not isinstance(value, list):
        return "the default is not a list" if p.is_secret else f"default {value!r} is not a list"
    for item in values:
        if not _fits(p, item):
            shown = "the default" if p.is_secret else f"default {item!r}"
            return f"{shown} is not a valid {p.kind_label}"
    if p.is_secret and short_secret(p, secret_forms(value)):
        return f"a secret's default must be at least {MIN_SECRET_LENGTH} characters long"
    return None


def parse_value(p: ParamShape, texts: Sequence[str]) -> Any:
    """Parse supplied text(s) for ``p``; raise ``ValueError`` with a message (no flag prefix)."""
    if p.is_array:
        items = [item.strip() for text in texts for item in text.split(",")]
        return [_parse_scalar(p, item) for item in items if item]
    text = texts[-1]
    if not text.strip():
        raise ValueError("a value is required, got a blank one")
    return _parse_scalar(p, text.strip() if p.kind != "string" else text)
