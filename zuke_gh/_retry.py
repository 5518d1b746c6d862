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

import httpx

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
    headers = response.headers
    after = headers.get("retry-after")
    if after is not None:
        wait = _retry_after_s(after, now_ms)
        if wait is not None:
            return wait
    reset = headers.get("x-ratelimit-reset", "")
    if headers.get("x-ratelimit-remaining") == "0" and reset.isdigit():
        return max(0.0, (int(reset) * 1000 - now_ms) / 1000)
    if response.status_code == 429 or "rate limit" in message.lower():
        return UNNAMED_RATE_LIMIT_WAIT_S
    return None


def transient_status(status: int) -> bool:
    """A status worth retrying when the call is idempotent (GitHub's 5xx)."""
    return status >= 500


def safe_to_resend(exc: httpx.TransportError) -> bool:
    """Whether a failed request certainly never reached GitHub (so even a POST may go again)."""
    return isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout)
