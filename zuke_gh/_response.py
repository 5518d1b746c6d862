"""What the client hands back, and the small pieces that read an answer.

``TokenSource`` is the seam for credentials (a fixed token, an App's minted
tokens); ``GitHubResponse`` is one answer with GitHub's clock read from its
``Date`` header; the helpers parse bodies, find ``Link: rel="next"`` and take
a token out of any text that could reach a message.
"""

from __future__ import annotations

import json as jsonlib
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx

from zuke_gh._etags import CachedAnswer
from zuke_gh._retry import server_time_ms
from zuke_gh.errors import GitHubError, one_line


@runtime_checkable
class TokenSource(Protocol):
    """Where the client gets its token before each request (None: unauthenticated).

    A source may also have ``refresh()``: the client calls it once when GitHub
    answers 401 (the token was revoked or expired early), then tries again.
    """

    def token(self) -> str | None: ...


class StaticToken:
    """A fixed token; its repr never shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def token(self) -> str | None:
        return self._value or None

    def __repr__(self) -> str:
        return "StaticToken(<hidden>)"


@dataclass(frozen=True)
class GitHubResponse:
    """One answer. ``body`` is the parsed JSON (``{}`` for an empty body)."""

    status: int
    body: Any
    headers: httpx.Headers = field(repr=False)
    #: GitHub's clock (the ``Date`` header, epoch ms): judge expiry and windows by it.
    server_time_ms: int | None = None
    #: True when a 304 was answered and ``body`` is the cached one (status is the cached 200).
    not_modified: bool = False
    #: The ``Link: rel="next"`` URL, if any (``GitHubClient.paginate`` follows it).
    next_url: str | None = None


NOT_JSON: Any = object()


def parse(response: httpx.Response, token: str | None) -> tuple[Any, str]:
    """(parsed JSON, or {} when empty, or NOT_JSON; the text, for messages).

    The token is taken out of the text before anything is parsed, so no body,
    message or detail built from an answer can carry it, nor a prefix of it.
    """
    content = response.content
    if not content.strip():
        return {}, ""
    text = scrub(content.decode("utf-8", "replace"), token)
    try:
        return jsonlib.loads(text), text
    except ValueError:
        pass
    return NOT_JSON, text


def scrub(text: str, token: str | None) -> str:
    return text.replace(token, "<token>") if token else text


def next_link(header: str | None) -> str | None:
    if not header:
        return None
    for part in header.split(","):
        url, _, rest = part.partition(";")
        if 'rel="next"' in rest.replace(" ", "") or "rel=next" in rest.replace(" ", ""):
            return url.strip().strip("<>")
    return None


def items_of(body: Any, item_key: str | None, display: str) -> list[Any]:
    items = body.get(item_key) if item_key is not None and isinstance(body, dict) else body
    if not isinstance(items, list):
        where = f"an object with a {item_key!r} list" if item_key else "a list"
        raise GitHubError(
            f"GitHub's answer to GET {display} is not {where}. Check the path and item_key.",
            method="GET",
            path=display,
        )
    return items


def answer_of(
    response: httpx.Response, method: str, display: str, token: str | None
) -> GitHubResponse:
    """The answer to return for a 2xx (or an expected status); a 2xx must be JSON."""
    body, text = parse(response, token)
    if body is NOT_JSON and 200 <= response.status_code < 300:
        kind = response.headers.get("content-type", "no content type")
        raise GitHubError(
            f"GitHub answered {response.status_code} to {method} {display} with a body that "
            f"is not JSON ({one_line(kind, 60)}). Check GITHUB_API_URL "
            "(on GitHub Enterprise it is https://HOST/api/v3).",
            status=response.status_code,
            method=method,
            path=display,
        )
    return GitHubResponse(
        status=response.status_code,
        body=text if body is NOT_JSON else body,
        headers=response.headers,
        server_time_ms=server_time_ms(response.headers),
        next_url=next_link(response.headers.get("link")),
    )


def from_cache(cached: CachedAnswer, response: httpx.Response) -> GitHubResponse:
    """A 304's answer: the cached body (parsed afresh), the 304's headers and clock."""
    return GitHubResponse(
        status=cached.status,
        body=jsonlib.loads(cached.content) if cached.content.strip() else {},
        headers=response.headers,
        server_time_ms=server_time_ms(response.headers),
        not_modified=True,
        next_url=next_link(response.headers.get("link") or cached.link),
    )
