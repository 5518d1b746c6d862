"""The one REST (and GraphQL) caller every zuke_gh feature uses (``GitHubClient``'s core).

What callers call (the verbs, ``paginate``, ``graphql``, the client's lifetime); each call's
attempts (token, pacing, retries, redirects, ETags) are :mod:`zuke_gh._sender`'s loop.

Synchronous on purpose: zuke's ``StateStore`` protocol is synchronous, and the
async ``github_workflow`` gate calls it through ``asyncio.to_thread``. Built on
httpx with an injectable transport (``httpx.MockTransport``, a respx router's
handler), so every path is testable without GitHub.

What it guarantees (``docs/github-client.md`` says it for users):

* Paths are templates with named segments, each value validated against git's
  ref-name rules and percent-encoded (:mod:`zuke_gh._paths`).
* The token goes only to URLs under the configured base URL: a redirect or a
  ``Link: rel="next"`` elsewhere is refused, never followed with the token.
* 5xx answers, rate limits and transport failures are retried inside one
  budget (:mod:`zuke_gh._retry`); a POST or PATCH is resent only when GitHub
  certainly did not act on it, unless the caller says it is idempotent.
* ``etag=True`` GETs are conditional (:mod:`zuke_gh._etags`).
* A GraphQL answer of HTTP 200 that says ``RATE_LIMITED`` (or a secondary
  limit) is waited out and sent again like a REST rate limit: GitHub applied
  nothing, so even a mutation may go again.
* Writes (POST, PATCH, PUT, DELETE, GraphQL mutations) are paced by the
  process's :class:`~zuke_gh._pacing.WritePacer`: one at a time, a second
  apart, inside GitHub's content-creation limits. A wait for a rate limit or
  for pacing longer than 2 s says so on the notice callback (stderr).
* A failure is one :class:`~zuke_gh.errors.GitHubError` line; no token ever
  reaches a message, a repr, a log line or an exception chain (errors are
  raised outside ``except`` blocks, so no httpx exception rides along).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from types import TracebackType
from typing import Any, Self

import httpx

from zuke_gh import _pacing as pacing
from zuke_gh._paths import expand, same_origin
from zuke_gh._response import GitHubResponse, StaticToken, TokenSource, items_of
from zuke_gh._sender import DEFAULT_API_VERSION, DEFAULT_USER_AGENT, Sender
from zuke_gh.errors import GitHubError

__all__ = [
    "DEFAULT_API_VERSION",
    "DEFAULT_USER_AGENT",
    "ClientCore",
    "GitHubResponse",
    "StaticToken",
    "TokenSource",
]


class ClientCore(Sender):
    """The request machinery of :class:`~zuke_gh.GitHubClient` (all of it but ``from_env``).

    Apart so that an App token source can mint its tokens with it while the public
    client builds such a source from the environment: no import circle.
    """

    # -- calls -------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        etag: bool = False,
        idempotent: bool | None = None,
        expected: Collection[int] = (),
        headers: Mapping[str, str] | None = None,
        **segments: object,
    ) -> GitHubResponse:
        """Call ``METHOD base_url + path`` with ``segments`` filled into the template.

        Any 2xx, or a status in ``expected``, is returned; anything else raises
        :class:`GitHubError`. ``idempotent`` (default: true for GET, HEAD, PUT,
        DELETE) allows resending after a 5xx or a read timeout.
        """
        expanded = expand(path, segments)
        return self._call(
            method.upper(),
            httpx.URL(self._base_text + expanded),
            expanded,
            params=params,
            json=json,
            etag=etag,
            idempotent=idempotent,
            expected=expected,
            headers=headers,
        )

    def get(self, path: str, /, **kwargs: Any) -> GitHubResponse:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, /, **kwargs: Any) -> GitHubResponse:
        return self.request("POST", path, **kwargs)

    def patch(self, path: str, /, **kwargs: Any) -> GitHubResponse:
        return self.request("PATCH", path, **kwargs)

    def put(self, path: str, /, **kwargs: Any) -> GitHubResponse:
        return self.request("PUT", path, **kwargs)

    def delete(self, path: str, /, **kwargs: Any) -> GitHubResponse:
        return self.request("DELETE", path, **kwargs)

    def paginate(
        self,
        path: str,
        /,
        *,
        params: Mapping[str, Any] | None = None,
        per_page: int = 100,
        max_pages: int = 10,
        item_key: str | None = None,
        etag: bool = False,
        **segments: object,
    ) -> Iterator[Any]:
        """Yield the items of every page, following ``Link: rel="next"`` (at most ``max_pages``).

        ``item_key`` names the list in an object body (``"workflow_runs"``);
        without it the body must be a list. Lazy: stop iterating to stop fetching.
        """
        expanded = expand(path, segments)
        query = {**(params or {}), "per_page": per_page}
        url: httpx.URL = httpx.URL(self._base_text + expanded)
        for page in range(max_pages):
            answer = self._call(
                "GET",
                url,
                expanded,
                params=query if page == 0 else None,
                etag=etag,
                idempotent=True,
            )
            yield from items_of(answer.body, item_key, expanded)
            if answer.next_url is None:
                return
            url = httpx.URL(answer.next_url)
            if not same_origin(url, self._base):
                raise GitHubError(
                    f"GitHub's next-page link for GET {expanded} points to "
                    f"{url.host or 'elsewhere'}, outside {self._base_text}: the token is not sent "
                    "there. Check GITHUB_API_URL.",
                    method="GET",
                    path=expanded,
                )

    def graphql(
        self, query: str, variables: Mapping[str, Any] | None = None, *, idempotent: bool = False
    ) -> dict[str, Any]:
        """POST a GraphQL document; the whole body (``data`` and ``errors``) is returned.

        GraphQL errors (``errors[0].type == "STALE_DATA"``) are the caller's to
        judge; only an HTTP failure, or a rate limit that outlasts the retry
        budget, raises. A mutation is not resent after a 5xx unless
        ``idempotent`` (e.g. a compare-and-swap on ``expectedHeadOid``), and is
        paced as a write.
        """
        answer = self._call(
            "POST",
            httpx.URL(self._graphql_url),
            "/graphql",
            json={"query": query, "variables": dict(variables or {})},
            idempotent=idempotent,
            write=pacing.is_mutation(query),
            graphql=True,
        )
        if not isinstance(answer.body, dict):
            raise GitHubError(
                "GitHub's GraphQL answer is not an object. Check GITHUB_API_URL.",
                status=answer.status,
                method="POST",
                path="/graphql",
            )
        return answer.body

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()
        for owned in self._owned:
            owned.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        auth = "none" if self._tokens is None else type(self._tokens).__name__
        return f"{type(self).__name__}(base_url={self._base_text!r}, auth={auth})"
