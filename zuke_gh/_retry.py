"""When to try a GitHub call again, and how long to wait first.

GitHub's documented rules (REST "rate limits" and "best practices"): after a
``retry-after`` header wait that many seconds; after ``x-ratelimit-remaining: 0``
wait until ``x-ratelimit-reset`` (epoch seconds, GitHub's clock); a 429 or a
403 that says "rate limit" with neither header means wait at least a minute.
5xx answers and transport failures back off exponentially with jitter.

Everything stays inside one budget (:class:`RetryPolicy`): a bounded number of
attempts and a bounded total wait, so a build never hangs on GitHub. A wait
the server asks for that does not fit the budget fails at once, saying when
to try again, rather than sleeping past it.
"""

from __future__ import annotations

from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from zuke._clock import iso
from zuke_gh.errors import GitHubError, one_line

#: GitHub's advice when a rate limit names no time: "wait for at least one minute".
UNNAMED_RATE_LIMIT_WAIT_S = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    """The retry budget of one call. ``RetryPolicy(max_attempts=1)`` never retries."""

    #: Attempts in all, the first included.
    max_attempts: int = 4
    #: The most a call sleeps between its attempts, in seconds, added up.
    max_wait_s: float = 60.0
    #: The first backoff after a 5xx or a transport failure; it doubles each time.
    base_delay_s: float = 1.0
    max_delay_s: float = 20.0
    #: Backoff grows by up to this fraction at random (server-named waits are kept exact).
    jitter: float = 0.25

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.max_wait_s < 0 or self.base_delay_s < 0:
            raise ValueError("RetryPolicy needs max_attempts >= 1 and non-negative waits")

    def backoff_s(self, attempt: int, rand: float) -> float:
        """The wait after failed attempt ``attempt`` (1-based); ``rand`` in [0, 1)."""
        delay = min(self.max_delay_s, self.base_delay_s * 2.0 ** (attempt - 1))
        return delay * (1 + self.jitter * rand)


def server_time_ms(headers: httpx.Headers) -> int | None:
    """GitHub's clock from the ``Date`` header (epoch ms), or None."""
    value = headers.get("date")
    if not value:
        return None
    try:
        return int(parsedate_to_datetime(value).timestamp() * 1000)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None


def _retry_after_s(value: str, now_ms: int) -> float | None:
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        stamp = parsedate_to_datetime(value).timestamp() * 1000
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return max(0.0, (stamp - now_ms) / 1000)


def rate_limit_wait_s(response: httpx.Response, message: str, now_ms: int) -> float | None:
    """How long GitHub asks us to wait before retrying, if ``response`` is a rate limit.

    ``now_ms`` is GitHub's clock where known (the reset header is in GitHub's
    time, so skew between the machines does not shorten or stretch the wait).
    """
    if response.status_code not in (403, 429):
        return None
    named = _named_wait(response.headers, now_ms)
    if named is not None:
        return named
    if response.status_code == 429 or "rate limit" in message.lower():
        return UNNAMED_RATE_LIMIT_WAIT_S
    return None


#: GraphQL error types that mean "rate limited": ``RATE_LIMITED`` (github/docs#22607, what
#: GitHub answers with HTTP 200) and ``RATE_LIMIT`` (seen in the wild: githubkit#271).
GRAPHQL_LIMIT_TYPES = frozenset({"RATE_LIMITED", "RATE_LIMIT"})


def graphql_rate_limit(body: Any, headers: httpx.Headers, now_ms: int) -> tuple[float, str] | None:
    """The wait a 200 GraphQL answer asks for, and GitHub's message, if it is a rate limit.

    GitHub ("Rate limits and query limits for the GraphQL API" § exceeding the
    rate limit): past the primary limit the status is still 200, with an error
    and ``x-ratelimit-remaining: 0`` — wait until ``x-ratelimit-reset``; past a
    secondary limit the status is 200 or 403 with a message saying so — wait
    ``retry-after`` seconds, else until the reset if nothing remains, else at
    least a minute. Nothing of a rate-limited request was applied, so even a
    mutation may go again.
    """
    errors = body.get("errors") if isinstance(body, dict) else None
    for error in errors if isinstance(errors, list) else []:
        if not isinstance(error, dict):
            continue
        kind, message = error.get("type"), str(error.get("message") or "")
        if kind in GRAPHQL_LIMIT_TYPES or "secondary rate limit" in message.lower():
            named = _named_wait(headers, now_ms)
            return (UNNAMED_RATE_LIMIT_WAIT_S if named is None else named), message
    return None


def graphql_limit(
    answer: Any, display: str, policy: RetryPolicy, now_ms: int
) -> tuple[GitHubError, float] | None:
    """A 200 GraphQL answer (a ``GitHubResponse``) that is a rate limit: its error and its
    wait (else None). ``now_ms`` is GitHub's clock where known (the answer's ``Date``)."""
    limited = graphql_rate_limit(answer.body, answer.headers, now_ms)
    if limited is None:
        return None
    wait, message = limited
    retry_at = now_ms + int(wait * 1000)
    said = one_line(message).rstrip(".") or "rate limited"
    error = GitHubError(
        f"GitHub's GraphQL API answered POST {display} with a rate limit: {said}. "
        f"Retry after {iso(retry_at)} (in {wait:.0f} s; this client waits at most "
        f"{policy.max_wait_s:.0f} s in all).",
        status=answer.status,
        method="POST",
        path=display,
        detail=one_line(message),
        retry_at_ms=retry_at,
    )
    return error, wait


def _named_wait(headers: httpx.Headers, now_ms: int) -> float | None:
    """``retry-after``, else the reset when nothing remains (None: neither is named)."""
    after = headers.get("retry-after")
    if after is not None:
        wait = _retry_after_s(after, now_ms)
        if wait is not None:
            return wait
    reset = headers.get("x-ratelimit-reset", "")
    if headers.get("x-ratelimit-remaining") == "0" and reset.isdigit():
        return max(0.0, (int(reset) * 1000 - now_ms) / 1000)
    return None


def transient_status(status: int) -> bool:
    """A status worth retrying when the call is idempotent (GitHub's 5xx)."""
    return status >= 500


def safe_to_resend(exc: httpx.TransportError) -> bool:
    """Whether a failed request certainly never reached GitHub (so even a POST may go again)."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
