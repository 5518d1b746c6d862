"""Redaction of secret values from text and JSON before they are printed or persisted."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MASK = "[redacted]"
_MIN_LINE = 8


class Redactor:
    """Replaces every registered secret (longest first) with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._patterns: list[str] = []
        self.add(*secrets)

    def add(self, *secrets: str) -> None:
        found = set(self._patterns)
        for secret in secrets:
            if not secret:
                continue
            found.add(secret)
            # A multi-line secret (a PEM key) may be printed line by line.
            found.update(
                line.strip() for line in secret.splitlines() if len(line.strip()) >= _MIN_LINE
            )
        self._patterns = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def text(self, value: str) -> str:
        for pattern in self._patterns:
            if pattern in value:
                value = value.replace(pattern, MASK)
        return value

    def json(self, value: Any) -> Any:
        """A copy of a JSON value with every string redacted (keys included)."""
        if not self._patterns:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        return value
