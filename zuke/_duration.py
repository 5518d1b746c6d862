"""Durations: ``"4h"``, ``"30m"``, ``"90s"``, ``"1h30m"``, ``"250ms"``, ``"2d"`` or milliseconds.

The digits are the number grammar of parameters (:mod:`zuke._param_parse`):
ASCII ``0-9`` only (``\\d`` would also take ``"٣"``), no ``_`` separators, and
a fraction needs digits on both sides of its point. No sign, no spaces.
"""

from __future__ import annotations

import math
import re

from zuke._errors import DurationError

_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NUMBER = r"[0-9]+(?:\.[0-9]+)?"
_PART = re.compile(rf"({_NUMBER})(ms|s|m|h|d)")
_WHOLE = re.compile(rf"(?:{_NUMBER}(?:ms|s|m|h|d))+")

Duration = str | int | float


def parse_duration(value: object, *, what: str = "duration", allow_zero: bool = False) -> int:
    """Milliseconds in ``value``; raise :class:`DurationError` naming ``what`` and the value."""
    hint = 'use e.g. "30m", "1h30m", "90s" or a number of milliseconds'
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DurationError(f"{what}: {value!r} is not a duration; {hint}")
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(_NUMBER, text):
            ms = float(text)
        elif _WHOLE.fullmatch(text):
            ms = sum(float(n) * _UNIT_MS[unit] for n, unit in _PART.findall(text))
        else:
            raise DurationError(f"{what}: {value!r} is not a duration; {hint}")
    else:
        if not math.isfinite(value):
            raise DurationError(f"{what}: {value!r} is not a duration; {hint}")
        ms = float(value)
    if ms < 0 or (ms == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise DurationError(f"{what}: {value!r} must be {bound}")
    return math.ceil(ms)


def format_duration(ms: float) -> str:
    """A short human form: ``12ms``, ``3.4s``, ``2m05s``, ``1h02m``."""
    if ms < 1000:
        return f"{ms:.0f}ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    seconds = int(ms // 1000)
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
