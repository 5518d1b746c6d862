"""One GitHub call's attempts: the token, the pacer's slot, retries, redirects, ETags (``Sender``).

Apart from the verbs, paging and GraphQL so the rules of sending live in one place: the
token (renewed once on a 401), the write pacer's slot, retries inside one budget
(:mod:`zuke_gh._retry`, :mod:`zuke_gh._judge`), redirects kept to the configured origin,
conditional GETs (:mod:`zuke_gh._etags`) and GraphQL's HTTP-200 rate limits.

* A POST or PATCH is resent only when GitHub certainly did not act on it, unless the
  caller says it is idempotent; a token that cannot be had leaves the call unsent.
* A wait for a rate limit longer than 2 s says so on the notice callback (stderr).
* No token reaches a message, a repr, a log line or an exception chain (errors are raised
  outside ``except`` blocks, so no httpx exception rides along).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import httpx

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke_gh import _env
from zuke_gh import _pacing as pacing
from zuke_gh._etags import CachedAnswer, EtagCache
from zuke_gh._judge import judge
from zuke_gh._paths import redirect_target
from zuke_gh._rate import RateReadings
from zuke_gh._response import (
    GitHubResponse,
    StaticToken,
    TokenSource,
    answer_of,
    from_cache,
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

__all__ = ["DEFAULT_API_VERSION", "DEFAULT_USER_AGENT", "Sender"]


@contextmanager
def _not_sent(reached: bool) -> Iterator[None]:
    """A token that cannot be had stops the call before it goes out: it is unsent, unless an
    earlier attempt reached GitHub."""
    try:
        yield
    except GitHubError as exc:
        exc.unsent = not reached
        raise


class Sender:
    """A client's connection, token, budgets and caches, and the loop that sends one call.

    :class:`~zuke_gh._client_core.ClientCore` adds what callers call (the verbs, paging,
    GraphQL, lifetime); every one of them ends in :meth:`_call`.
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
