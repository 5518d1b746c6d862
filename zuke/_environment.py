"""A target's deployment environment (``t.environment("staging", url=...)``): the checks.

The name and the URL reach a run record, ``zuke runs show``, the graph, MCP, the web view and
(through a :class:`~zuke.RunReporter`) GitHub's Deployments, so both are checked where they
come in — the name when the build is defined, a URL when it is given or set — and a bad one
is refused in one line naming the target, never stored. Standard library only.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: GitHub's limit on an environment's name ("Environment names ... maximum of 255 characters",
#: https://docs.github.com/actions/deployment/targeting-different-environments)
MAX_NAME = 255
#: a URL longer than this is not one a person opens (the web view's own cap, ``safe_url``)
MAX_URL = 2048
#: characters that would end a label in the mermaid or dot graph, or open markup
_MARKUP = '"<>`\\'


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot name an environment, or ``None`` if it can."""
    if not isinstance(name, str) or not name.strip():
        return f"the environment's name must be a non-empty string, got {name!r}"
    if len(name) > MAX_NAME:
        return f"the environment's name is {len(name)} characters; GitHub allows {MAX_NAME}"
    if name != name.strip() or any(ord(c) < 32 or ord(c) == 127 for c in name):
        return f"the environment's name {name!r} has control characters or edge spaces"
    if any(c in _MARKUP for c in name):
        return f"the environment's name {name!r} has one of {_MARKUP} (kept out of graphs)"
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "the environment's name holds a lone surrogate"
    return None


def url_problem(url: object) -> str | None:
    """Why ``url`` cannot be an environment's URL (an absolute http(s) URL), or ``None``."""
    if not isinstance(url, str):
        return f"the environment's URL must be a string, got {type(url).__name__}"
    if len(url) > MAX_URL:
        return f"the environment's URL is {len(url)} characters; at most {MAX_URL}"
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url):
        return "the environment's URL has spaces or control characters"
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        return f"the environment's URL must be an absolute http(s) URL, got {url!r}"
    return None


__all__ = ["MAX_NAME", "MAX_URL", "name_problem", "url_problem"]
