"""The one REST (and GraphQL) caller every zuke_gh feature uses (``GitHubClient``'s core).

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

import logging
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Self

import httpx

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke_gh import _env
from zuke_gh import _pacing as pacing
from zuke_gh._etags import CachedAnswer, EtagCache
from zuke_gh._judge import judge
from zuke_gh._paths import expand, redirect_target, same_origin
from zuke_gh._rate import RateReadings
from zuke_gh._response import (
    GitHubResponse,
    StaticToken,
    TokenSource,
    answer_of,
    from_cache,
    items_of,
    scrub,
)
from zuke_gh._retry import (
    RetryPolicy,
    graphql_limit,
    safe_to_resend,
    server_time_ms,
    transient_status,
)
from zuke_gh.errors import GitHubError, one_line

DEFAULT_API_VERSION = "2022-11-28"
DEFAULT_USER_AGENT = "zuke-gh/0.1"
_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_WRITES = frozenset({"POST", "PATCH", "PUT", "DELETE"})
_log = logging.getLogger("zuke_gh")

__all__ = ["ClientCore", "GitHubResponse", "StaticToken", "TokenSource"]


@contextmanager
def _not_sent(reached: bool) -> Iterator[None]:
    """A token that cannot be had stops the call before it goes out: it is unsent, unless an
    earlier attempt reached GitHub."""
    try:
        yield
    except GitHubError as exc:
        exc.unsent = not reached
        raise


class ClientCore:
    """The request machinery of :class:`~zuke_gh.GitHubClient` (all of it but ``from_env``).

    Apart so that an App token source can mint its tokens with it while the public
    client builds such a source from the environment: no import circle.
    """

    def __init__(
        self,
        *,
        token: str | TokenSource | None = None,
        base_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        api_version: str = DEFAULT_API_VERSION,
        retry: RetryPolicy | None = None,
        timeout_s: float = 30.0,
        user_agent: str = DEFAULT_USER_AGENT,
        etag_cache_size: int = 256,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
        rand: Callable[[], float] = random.random,
        pacer: pacing.WritePacer | pacing.ProcessPacer | None = pacing.PROCESS_PACER,
        notice: pacing.Notice | None = pacing.stderr_notice,
        token_name: str | None = None,
    ) -> None:
        self._base_text = _env.normalise_base_url(base_url or _env.DEFAULT_BASE_URL)
        self._base = httpx.URL(self._base_text)
        self._graphql_url = _env.graphql_url(self._base_text)
        self._tokens: TokenSource | None = StaticToken(token) if isinstance(token, str) else token
        #: where the token comes from, for messages that say which credential to check
        #: (``GH_TOKEN``, ``GITHUB_TOKEN``, a GitHub App); never the token itself
        self.token_name = token_name or (
            "no token" if self._tokens is None else "the token given to GitHubClient"
        )
        #: what GitHub last said is left of each hourly budget (:mod:`zuke_gh._rate`)
        self.rates = RateReadings()
        self._api_version = api_version
        self._retry = retry or RetryPolicy()
        self._user_agent = user_agent
        self._etags = EtagCache(etag_cache_size)
        self._clock, self._sleep, self._rand = clock, sleep, rand
        self._owned: list[Any] = []  # token sources from_env made (closed with the client)
        #: paces this client's writes (None: unpaced); shared by the process's clients
        self.pacer = pacing.chosen(pacer, self._base_text, tested=transport is not None)
        self._notice = notice
        self._http = httpx.Client(transport=transport, timeout=timeout_s, follow_redirects=False)

    @property
    def base_url(self) -> str:
        return self._base_text

    def reserve_writes(self, writes: int) -> bool:
        """Whether ``writes`` more writes fit the pacer's hourly budget now (always, unpaced)."""
        return self.pacer is None or self.pacer.reserve(writes)

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

    # -- the loop ----------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        url: httpx.URL,
        display: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        etag: bool = False,
        idempotent: bool | None = None,
        expected: Collection[int] = (),
        headers: Mapping[str, str] | None = None,
        write: bool | None = None,
        graphql: bool = False,
    ) -> GitHubResponse:
        resend = method in _IDEMPOTENT if idempotent is None else idempotent
        paced = self.pacer if (method in _WRITES if write is None else write) else None
        policy, waited, attempt, hops = self._retry, 0.0, 0, 0
        refreshed = False  # a token refused with 401 is renewed (an App token) once
        reached = False  # an attempt reached GitHub and may have acted (a 5xx, a lost answer)
        while True:
            attempt += 1
            with _not_sent(reached):
                token = self._tokens.token() if self._tokens is not None else None
            request = self._build(method, url, params, json, headers, token)
            cached = self._etags.get(str(request.url)) if etag and method == "GET" else None
            if cached is not None:
                request.headers["If-None-Match"] = cached.etag
            if paced is None:
                response, why, unsent = self._send(request, token)
            else:
                left = max(0.0, policy.max_wait_s - waited)
                slot = paced.slot(max_wait_s=left, what=f"{method} {display}", notice=self._notice)
                with _not_sent(reached), slot:  # a write past the pacer's limits is not sent
                    response, why, unsent = self._send(request, token)
            if response is not None:
                self.rates.note(response.headers)
            wait: float | None = None
            if response is None:
                reached = reached or not unsent
                error = GitHubError(
                    f"could not reach GitHub at {self._base_text}: {why}. "
                    "Check GITHUB_API_URL and the network.",
                    method=method,
                    path=display,
                    unsent=not reached,
                )
                if resend or unsent:
                    wait = policy.backoff_s(attempt, self._rand())
            else:
                status = response.status_code
                if status in _REDIRECTS and "location" in response.headers:
                    hops += 1
                    url = redirect_target(response, self._base, method, display, hops)
                    method = "GET" if status == 303 else method
                    params, attempt = None, attempt - 1
                    continue
                if status == 304 and cached is not None:
                    return from_cache(cached, response)
                if 200 <= status < 300:
                    answer = self._answer(response, method, display, token, etag)
                    now = server_time_ms(answer.headers) or self._clock.now_ms()
                    limited = graphql_limit(answer, display, policy, now) if graphql else None
                    if limited is None:
                        return answer
                    error, wait = limited  # GitHub applied nothing: any request may go again
                    why = f"a GraphQL rate limit on {method} {display}"
                else:
                    why = f"{status} on {method} {display}"
                    with _not_sent(reached):  # a 401 changed nothing on GitHub's side
                        renewed = status == 401 and not refreshed and self._refresh_token()
                    if renewed:
                        refreshed, attempt = True, attempt - 1
                        continue  # so any method may go again
                    reached = reached or transient_status(status)
                    error, wait = judge(
                        response, method, display, token, resend=resend, attempt=attempt,
                        policy=self._retry, rand=self._rand(), now_ms=self._clock.now_ms(),
                    )  # fmt: skip
                    if status in expected and error.retry_at_ms is None:
                        return self._answer(response, method, display, token, etag)  # not a limit
            if wait is None or not self._fits(policy, attempt, waited, wait):
                raise error
            notice, until = self._notice, error.retry_at_ms
            if notice is not None and until is not None and wait > pacing.NOTICE_AFTER_S:
                notice(pacing.wait_line("GitHub rate limit", wait, until))  # said once a wait
            _log.info(
                "GitHub: %s; retrying in %.1f s (attempt %d of %d)",
                why,
                wait,
                attempt + 1,
                policy.max_attempts,
            )
            self._sleep(wait)
            waited += wait

    def _refresh_token(self) -> bool:
        """Renew a refused token if its source can (``refresh()``, as App tokens have)."""
        refresh = getattr(self._tokens, "refresh", None)
        if not callable(refresh):
            return False
        refresh()
        return True

    def _build(
        self,
        method: str,
        url: httpx.URL,
        params: Mapping[str, Any] | None,
        json: Any,
        extra: Mapping[str, str] | None,
        token: str | None,
    ) -> httpx.Request:
        headers = httpx.Headers(
            {
                "Accept": "application/vnd.github+json",
                "X-GitHub-Api-Version": self._api_version,
                "User-Agent": self._user_agent,
            }
        )
        headers.update({k: v for k, v in (extra or {}).items() if k.lower() != "authorization"})
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return self._http.build_request(
            method, url, params=dict(params) if params else None, json=json, headers=headers
        )

    def _send(
        self, request: httpx.Request, token: str | None
    ) -> tuple[httpx.Response | None, str, bool]:
        """The response, or (None, why, certainly-unsent); never lets an httpx error escape."""
        try:
            return self._http.send(request), "", False
        except httpx.TransportError as exc:
            reason = scrub(one_line(f"{type(exc).__name__}: {exc}".rstrip(": ")), token)
            unsent = safe_to_resend(exc)
        return None, reason, unsent

    def _fits(self, policy: RetryPolicy, attempt: int, waited: float, wait: float) -> bool:
        return attempt < policy.max_attempts and waited + wait <= policy.max_wait_s

    def _answer(
        self, response: httpx.Response, method: str, display: str, token: str | None, etag: bool
    ) -> GitHubResponse:
        answer = answer_of(response, method, display, token)
        tag = response.headers.get("etag")
        if etag and method == "GET" and response.status_code == 200 and tag:
            link = response.headers.get("link")
            entry = CachedAnswer(tag, response.status_code, response.content, link)
            self._etags.put(str(response.request.url), entry)
        return answer

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
