"""HTML from the view's values: Jinja templates, escaped by default, and the static files.

Every ``{{ value }}`` is HTML-escaped (``autoescape``), and before that every
string is made visible (:func:`visible`): a record's text may hold control,
bidi-override or line-separator characters, which would reorder or hide what
a page shows (a target named ``deploy\u202egnp.exe``); they are shown as
escapes (``\\u202e``), as ``zuke runs show`` prints them. Only values the
view made itself are marked safe (the SVG's path data is numbers).

Static files (the stylesheet, the page script, the icon) are served under
names carrying a hash of their content, so a browser may keep them for a
year and a new zuke's are new names.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from markupsafe import Markup, escape

from zuke._clock import iso, parse_iso
from zuke._duration import format_duration
from zuke._serve.ui.graph import GLYPHS

_HERE = Path(__file__).parent
STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".svg": "image/svg+xml"}  # fmt: skip
#: a status's sign beside its word (targets' from the graph; a run's own)
BADGE_GLYPHS = {**GLYPHS, "suspended": "◆", "cancelling": "…", "cancelled": "✗"}
_UNSAFE = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def visible(value: Any) -> Any:
    """A string with control, bidi and line-separator characters shown as escapes (tab and
    newline kept); anything else (numbers, safe markup) unchanged."""
    if isinstance(value, str) and not value.isprintable() and not isinstance(value, Markup):
        return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", value)
    return value


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    url: str


def load_assets() -> dict[str, Asset]:
    """The static files by their hashed URL path (``/ui/static/ui.3f2a9c1e.css``)."""
    out: dict[str, Asset] = {}
    for path in sorted((_HERE / "static").iterdir()):
        if path.suffix not in STATIC_TYPES:
            continue
        body = path.read_bytes()
        digest = hashlib.sha256(body).hexdigest()[:12]
        url = f"/ui/static/{path.stem}.{digest}{path.suffix}"
        out[url] = Asset(body=body, content_type=STATIC_TYPES[path.suffix], url=url)
    return out


def _ms(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return parse_iso(value) if isinstance(value, str) and value else None


def stamp(value: Any) -> str:
    """An instant as ``2026-01-15 09:30:05 UTC`` (the text itself when it is no instant)."""
    ms = _ms(value)
    if ms is None:
        return str(value) if value else "—"
    text = iso(ms)  # 2026-01-15T09:30:05.123Z: its second's text is kept from one call to the next
    return f"{text[:10]} {text[11:19]} UTC"


def iso_of(value: Any) -> str:
    """An instant as ISO 8601 in UTC (a ``<time>``'s ``datetime``), or ``""``."""
    ms = _ms(value)
    return iso(ms) if ms is not None else ""


def span(ms: int | None) -> str:
    """A coarse length of time — ``<1 min``, ``5 min``, ``2 h 05 min``, ``3 d 4 h`` — so a
    page's text changes at most once a minute as time passes."""
    if ms is None:
        return "—"
    minutes = max(ms, 0) // 60_000
    if minutes < 1:
        return "<1 min"
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h"


@jinja2.pass_context
def _ago(ctx: jinja2.runtime.Context, value: Any) -> str:
    ms = _ms(value)
    return "—" if ms is None else span(int(ctx["now_ms"]) - ms)


@jinja2.pass_context
def _until(ctx: jinja2.runtime.Context, value: Any) -> str:
    ms = _ms(value)
    if ms is None:
        return "—"
    left = ms - int(ctx["now_ms"])
    return f"in {span(left)}" if left >= 0 else f"passed {span(-left)} ago"


def _took(ms: int | None) -> str:
    return "—" if ms is None else format_duration(ms)


# The few fragments every row repeats are filters, not macros: a Jinja macro call costs
# about ten times a function call, and a 1,000-target page has thousands of them. Text
# from a record goes through ``escape``; stamps are our own digits (``iso``).


def badge(status: str) -> Markup:
    word = escape(visible(status))
    glyph = BADGE_GLYPHS.get(status, "")
    return Markup(f'<span class="badge s-{word}"><span class="glyph" aria-hidden="true">'
                  f"{glyph}</span> {word}</span>")  # fmt: skip


def when(value: Any) -> Markup:
    """An instant as a ``<time>``: the UTC stamp, machine-readable in ``datetime``."""
    if not value:
        return Markup("—")
    ms = _ms(value)
    if ms is None:  # not an instant: the text as it is
        return escape(visible(str(value)))
    return Markup(f'<time datetime="{iso(ms)}">{stamp(ms)}</time>')


@jinja2.pass_context
def _ago_time(ctx: jinja2.runtime.Context, value: Any, suffix: str = " ago") -> Markup:
    """How long ago, as a ``<time>`` whose title is the stamp."""
    ms = _ms(value)
    if ms is None:
        return escape(visible(str(value))) if value else Markup("—")
    took = escape(_ago(ctx, ms) + suffix)
    return Markup(f'<time datetime="{iso(ms)}" title="{stamp(ms)}">{took}</time>')


class Renderer:
    """The view's templates, compiled once."""

    def __init__(self, assets: Mapping[str, Asset]) -> None:
        self._by_name = {Path(a.url).name.split(".")[0] + Path(a.url).suffix: a.url
                         for a in assets.values()}  # fmt: skip
        env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(_HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            finalize=visible,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        env.filters.update(stamp=stamp, iso=iso_of, ago=_ago, until=_until, took=_took, span=span,
                           badge=badge, when=when, ago_time=_ago_time)  # fmt: skip
        env.globals.update(asset=self.asset, url=url, glyphs=BADGE_GLYPHS)
        self._env = env

    def asset(self, name: str) -> str:
        return self._by_name[name]

    def render(self, template: str, context: Mapping[str, Any]) -> str:
        return self._env.get_template(template).render(context)


def url(path: str, params: Mapping[str, Any] | None = None, **more: Any) -> str:
    """``path`` with the non-empty ``params`` and ``more`` as its query, encoded."""
    merged = {**(params or {}), **more}
    query = urlencode({k: v for k, v in merged.items() if v not in (None, "")})
    return f"{path}?{query}" if query else path


__all__ = ["Asset", "Renderer", "load_assets", "span", "stamp", "url", "visible"]
