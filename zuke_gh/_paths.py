"""Turning a path template and user-supplied values into a URL path, safely.

Every value that reaches a GitHub URL path (owner, repo, workflow file, ref,
branch, file path) passes git's ref-name rules here, once, and is
percent-encoded segment by segment — so ``..`` cannot climb, ``%2e%2e`` cannot
decode into ``..``, and a ``/`` cannot open a segment the caller did not name.
The same module decides which absolute URLs (a redirect's ``Location``, a
``Link: rel="next"``) may carry the token: only those under the configured
base URL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote

import httpx

from zuke_gh.errors import GitHubError, GitHubPathError

#: ``{name}`` — one segment; ``{name+}`` — one or more segments joined by ``/``.
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(\+?)\}")
#: What a template's literal text may contain (GitHub's own paths need no more).
_LITERAL = re.compile(r"[A-Za-z0-9/_.\-]*")
_FORBIDDEN_CHARS = "~^:?*[\\"
_SLUG_PART = re.compile(r"[A-Za-z0-9._-]+")
MAX_REDIRECTS = 3


def ref_name_problem(value: str) -> str | None:
    """Why ``value`` breaks git's ref-name rules (zuke-original §27), or None."""
    if not value:
        return "it is empty"
    if ".." in value:
        return "it contains '..'"
    if value.startswith("/") or value.endswith("/"):
        return "it starts or ends with '/'"
    if value.startswith("-"):
        return "it starts with '-'"
    if value.endswith(".lock"):
        return "it ends with '.lock'"
    if value.endswith("."):
        return "it ends with '.'"
    for char in value:
        if char in _FORBIDDEN_CHARS:
            return f"it contains {char!r}"
        if ord(char) <= 0x20 or ord(char) == 0x7F:
            return "it contains a space or a control character"
    if "@{" in value:
        return "it contains '@{'"
    return None


def check_segment(what: str, value: str, *, slashes: bool = False) -> str:
    """``value`` if it is a safe path segment (``slashes``: several, joined by ``/``)."""
    problem = ref_name_problem(value)
    if problem is None and not slashes and "/" in value:
        problem = "it contains '/' where one path segment is expected"
    if problem is None and slashes:
        parts = value.split("/")
        if any(part in ("", ".") for part in parts):
            problem = "it has an empty or '.' segment"
        elif any(part.endswith((".lock", ".")) for part in parts):
            problem = "a segment ends with '.lock' or '.'"
    if problem is not None:
        raise GitHubPathError(f"{what} {value!r} is refused: {problem}. Pass a valid git name.")
    return value


def _segment_text(name: str, value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise GitHubPathError(
            f"path segment {name!r} must be a string or an integer, not {type(value).__name__}."
        )
    if isinstance(value, int):
        if value < 0:
            raise GitHubPathError(f"path segment {name!r} is negative ({value}).")
        return str(value)
    return value


def expand(template: str, segments: Mapping[str, object]) -> str:
    """The URL path for ``template`` with each placeholder validated and percent-encoded.

    ``expand("/repos/{owner}/{repo}", {"owner": "acme", "repo": "app"})`` is
    ``/repos/acme/app``. A template must start with ``/`` and contain only
    letters, digits, ``/_.-`` and placeholders; every placeholder needs a
    value and every value a placeholder.
    """
    literal = _PLACEHOLDER.sub("x", template)
    if (
        not template.startswith("/")
        or template.startswith("//")
        or "//" in literal
        or ".." in literal
        or not _LITERAL.fullmatch(literal)
    ):
        raise GitHubPathError(
            f"{template!r} is not a path template: pass a path such as "
            "'/repos/{owner}/{repo}' and put each value in a named segment (no URL, no '?')."
        )
    used: set[str] = set()

    def fill(match: re.Match[str]) -> str:
        name, plus = match.group(1), match.group(2) == "+"
        if name not in segments:
            raise GitHubPathError(f"path {template!r} needs a value for {{{name}}}.")
        used.add(name)
        text = check_segment(name, _segment_text(name, segments[name]), slashes=plus)
        return "/".join(quote(part, safe="") for part in text.split("/"))

    path = _PLACEHOLDER.sub(fill, template)
    unused = sorted(set(segments) - used)
    if unused:
        raise GitHubPathError(f"path {template!r} has no placeholder for {', '.join(unused)}.")
    return path


def repo_slug(slug: str) -> tuple[str, str]:
    """``("owner", "name")`` from ``"owner/name"``: two ``[A-Za-z0-9._-]`` parts, not ``..``."""
    parts = slug.split("/")
    if len(parts) != 2 or not all(
        _SLUG_PART.fullmatch(part) and part not in (".", "..") for part in parts
    ):
        raise GitHubPathError(
            f"repository {slug!r} is refused: write it as 'owner/name' "
            "(letters, digits, '.', '_' and '-')."
        )
    return parts[0], parts[1]


def same_origin(url: httpx.URL, base: httpx.URL) -> bool:
    """Whether ``url`` is under ``base`` (scheme, host, port, path prefix): may it get the token."""
    if (url.scheme, url.host, url.port) != (base.scheme, base.host, base.port):
        return False
    prefix = base.path.rstrip("/")
    path = url.path
    return ".." not in path.split("/") and (path == prefix or path.startswith(prefix + "/"))


def redirect_target(
    response: httpx.Response, base: httpx.URL, method: str, display: str, hops: int
) -> httpx.URL:
    """Where a redirect points, if the token may follow it there (else GitHubError)."""
    target = response.request.url.join(response.headers["location"])
    if hops > MAX_REDIRECTS or not same_origin(target, base):
        where = "too many times" if hops > MAX_REDIRECTS else f"to {target.host or target}"
        raise GitHubError(
            f"GitHub redirected {method} {display} {where}, outside {base}: the token is not "
            "sent there. Check GITHUB_API_URL and the names in the call.",
            status=response.status_code,
            method=method,
            path=display,
        )
    return target
