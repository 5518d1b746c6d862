"""The errors zuke_gh raises, under zuke's one root.

    ZukeError
    └── GitHubError              GitHub answered with a failure, or could not be reached
        ├── GitHubPathError      a path template or segment refused before any request
        ├── GitHubAppKeyError    GitHub App credentials that cannot sign (empty, unreadable key)
        └── GitHubAccessError    GitHub refuses the token (401, a 403 that is no rate limit, a
                                 repository it cannot see): also a TriggerAccessError, so a
                                 sweep that meets it goes red

Every message is one line, names the call as ``METHOD /expanded/path`` (never
the query string, never a token) and ends with what to do. The client builds
them here so that the wording, the length cap and the hints live in one place.
"""

from __future__ import annotations

from typing import Any

from zuke._errors import TriggerAccessError, ZukeError

#: How much of GitHub's own explanation a message quotes.
DETAIL_LIMIT = 300


class GitHubError(ZukeError):
    """A GitHub call failed. ``status`` is None when no HTTP answer came (or none was sent);
    ``unsent`` says the call certainly never reached GitHub (even a POST did nothing)."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        method: str | None = None,
        path: str | None = None,
        detail: str = "",
        retry_at_ms: int | None = None,
        unsent: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.method = method
        self.path = path
        #: GitHub's ``message`` and ``errors`` fields, one line, at most 300 characters.
        self.detail = detail
        #: When a rate limit lifts (epoch ms, GitHub's clock), if GitHub said.
        self.retry_at_ms = retry_at_ms
        #: True when no attempt of the call reached GitHub: the connection was refused, its
        #: name did not resolve, connecting timed out, or its token could not be had. A
        #: request that was sent and then lost its answer (a read timeout) is not unsent.
        self.unsent = unsent


class GitHubPathError(GitHubError, ValueError):
    """A path template or a segment value that could address something the caller did not name."""


class GitHubAppKeyError(GitHubError, ValueError):
    """GitHub App credentials that cannot be used: a missing id, an empty or unreadable key."""


class GitHubAccessError(GitHubError, TriggerAccessError):
    """GitHub refuses this process's token for good: a 401, a 403 that is no rate limit, or a
    404 on the repository itself. Asking again cannot help until someone fixes the token or
    its permissions; the message names the token's source and the permission to check."""


def one_line(text: str, limit: int = DETAIL_LIMIT) -> str:
    """``text`` on one line, cut to ``limit`` characters (with an ellipsis)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def github_detail(body: Any, raw: str = "") -> str:
    """GitHub's explanation from an error body: ``message`` plus each of ``errors``."""
    if not isinstance(body, dict):
        return one_line(raw)
    parts: list[str] = []
    message = body.get("message")
    if isinstance(message, str) and message:
        parts.append(message)
    errors = body.get("errors")
    for item in errors if isinstance(errors, list) else []:
        if isinstance(item, str):
            parts.append(item)
        elif isinstance(item, dict):
            text = item.get("message")
            if not isinstance(text, str) or not text:
                text = " ".join(str(item[k]) for k in ("resource", "field", "code") if k in item)
            if text:
                parts.append(text)
    return one_line("; ".join(parts) if parts else raw)


def status_hint(status: int, *, authenticated: bool) -> str:
    """What to do about an HTTP failure status."""
    if status in (401, 403) and not authenticated:
        return "No token was sent: set GH_TOKEN or GITHUB_TOKEN, or configure a GitHub App."
    if status == 401:
        return "The token is invalid, expired or revoked: check GH_TOKEN / GITHUB_TOKEN or the App."
    if status == 403:
        return (
            "The token lacks a permission: dispatching a workflow needs `actions: write`, "
            "the state branch needs `contents: write`."
        )
    if status == 404:
        return (
            "It does not exist, or the token cannot see it (GitHub answers 404 when access is "
            "missing): check the names and the token's repository access."
        )
    if status >= 500:
        return "GitHub is failing: try again later."
    return "Check the request against GitHub's documentation for this endpoint."


def answered(method: str, path: str, status: int, detail: str, hint: str) -> str:
    """``GitHub answered 422 to POST /x: <detail>. <hint>``."""
    said = f": {detail.rstrip('.')}." if detail else "."
    return f"GitHub answered {status} to {method} {path}{said} {hint}"


def transient(error: GitHubError) -> bool:
    """A failure worth waiting out: no answer, a 5xx, or a rate limit (never a bad key)."""
    if isinstance(error, GitHubAppKeyError):
        return False
    status = error.status
    return (
        status is None
        or status >= 500
        or status == 429
        or error.retry_at_ms is not None
        or (status == 403 and "rate limit" in (error.detail or "").lower())
    )


def refused(error: GitHubError) -> bool:
    """GitHub refused the token itself: a 401, or a 403 that is no rate limit (a missing
    permission). A 404 is the caller's to judge (the thing asked for, or the repository)."""
    if isinstance(error, GitHubAppKeyError) or transient(error):
        return False
    return error.status in (401, 403)
