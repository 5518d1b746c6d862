"""Redaction of secret values from text and JSON before they are printed, persisted or sent.

One :class:`Redactor` per run holds every form a secret can take on the way
out: the text as given, each element of an array secret, a number's canonical
spelling, and its common encodings — the escaped forms ``repr()`` and
``json.dumps()`` produce (an error message that quotes a value with ``!r``
escapes it), HTML-escaped (``html.escape`` with and without ``quote``, and
the ``&#39;``/``&#34;`` spelling other escapers use: an issue body), and
URL-encoded (``quote``, ``quote(safe="")``, ``quote_plus``, with upper- or
lower-case hex: a query string, a link). Replacement is plain substring
replacement, longest pattern first, so a secret is masked inside any other
value too (``https://deploy:[redacted]@host``).

Secrets shorter than :data:`MIN_SECRET_LENGTH` are refused where parameters
resolve (:mod:`zuke._params`): masking a one-letter secret garbles every line
("Fail[redacted]d") and, by doing so, tells the reader what the secret is.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

MASK = "[redacted]"
#: The shortest secret value zuke accepts (the rule GitLab applies to masked variables).
MIN_SECRET_LENGTH = 8
_MIN_LINE = MIN_SECRET_LENGTH


def _html(text: str) -> set[str]:
    """``text`` HTML-escaped as ``html.escape`` writes it (with and without ``quote``), and
    with the decimal references other escapers write for quotes (``&#39;``, ``&#34;``)."""
    import html  # only a run with secrets needs it (html.entities: ~1.5 ms at start-up)

    quoted = html.escape(text, quote=True)
    return {quoted, html.escape(text, quote=False),
            quoted.replace("&#x27;", "&#39;").replace("&quot;", "&#34;")}  # fmt: skip


def _url(text: str) -> set[str]:
    """``text`` URL-encoded: ``quote`` (``/`` kept), ``quote(safe="")``, ``quote_plus``, each
    also with lower-case hex digits."""
    import re
    from urllib.parse import quote, quote_plus

    found = {quote(text), quote(text, safe=""), quote_plus(text)}
    found.update(re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), f) for f in list(found))
    return found


def _forms(secret: str) -> set[str]:
    """The spellings of ``secret`` that may reach output: raw, ``repr``- and JSON-escaped,
    HTML-escaped (each of those) and URL-encoded."""
    escaped = {secret, repr(secret)[1:-1], json.dumps(secret)[1:-1],
               json.dumps(secret, ensure_ascii=False)[1:-1]}  # fmt: skip
    found = set(escaped)
    for form in escaped:
        found.update(_html(form))
    found.update(_url(secret))
    # A multi-line secret (a PEM key) may be printed line by line.
    found.update(line.strip() for line in secret.splitlines() if len(line.strip()) >= _MIN_LINE)
    return {f for f in found if f}


class Redactor:
    """Replaces every registered secret (longest first) with ``[redacted]``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._patterns: list[str] = []
        self.add(*secrets)

    def add(self, *secrets: str) -> None:
        found = set(self._patterns)
        for secret in secrets:
            if secret:
                found.update(_forms(secret))
        self._patterns = sorted(found, key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._patterns)

    def text(self, value: str) -> str:
        for pattern in self._patterns:
            if pattern in value:
                value = value.replace(pattern, MASK)
        return value

    def reveals(self, value: str, *, normalise: Callable[[str], str] | None = None) -> bool:
        """Whether ``value`` contains a secret (or a secret passed through ``normalise``)."""
        return any(
            p in value or (normalise is not None and normalise(p) in value) for p in self._patterns
        )

    def json(self, value: Any) -> Any:
        """A copy of a JSON value with every string redacted (keys included).

        A number whose spelling contains a secret (an ``.integer().secret()``
        written with ``ctx.state.set``) becomes the string ``"[redacted]"``.
        """
        if not self._patterns:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(str(k)): self.json(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.json(v) for v in value]
        if isinstance(value, int | float) and not isinstance(value, bool):
            spelled = json.dumps(value)
            cleaned = self.text(spelled)
            return value if cleaned == spelled else cleaned
        return value
