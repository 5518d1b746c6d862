"""What a failed GitHub answer means: the one-line error, and whether (and when) to retry.

A rate limit (primary or secondary) is waited out as GitHub asks, judged by
GitHub's clock; a 5xx is retried with backoff only when the request is safe
to send again (a POST may already have taken effect); anything else is an
error whose hint says what to do (a permission, a name, the token) — a 401,
or a 403 that is no rate limit, a :class:`~zuke_gh.errors.GitHubAccessError`
(a gate's check that meets one makes the sweep fail).
"""

from __future__ import annotations

import httpx

from zuke._clock import iso
from zuke_gh._response import parse
from zuke_gh._retry import RetryPolicy, rate_limit_wait_s, server_time_ms, transient_status
from zuke_gh.errors import GitHubAccessError, GitHubError, answered, github_detail, status_hint


def judge(
    response: httpx.Response,
    method: str,
    display: str,
    token: str | None,
    *,
    resend: bool,
    attempt: int,
    policy: RetryPolicy,
    rand: float,
    now_ms: int,
) -> tuple[GitHubError, float | None]:
    """The error a failed answer means, and the wait before retrying it (None: do not).

    ``now_ms`` is the local clock, used only when the answer carries no ``Date``.
    """
    status = response.status_code
    body, text = parse(response, token)
    detail = github_detail(body, text)
    now = server_time_ms(response.headers) or now_ms
    limit_wait = rate_limit_wait_s(response, detail, now)
    retry_at: int | None = None
    wait: float | None = None
    if limit_wait is not None:
        wait, retry_at = limit_wait, now + int(limit_wait * 1000)
        hint = (
            f"GitHub's rate limit: retry after {iso(retry_at)} (in {limit_wait:.0f} s; "
            f"this client waits at most {policy.max_wait_s:.0f} s in all)."
        )
    elif transient_status(status) and resend:
        wait = policy.backoff_s(attempt, rand)
        hint = f"GitHub is failing: try again later (tried {attempt} times)."
    elif transient_status(status):
        hint = (
            f"Not retried: the {method} may already have taken effect; check before repeating it."
        )
    else:
        hint = status_hint(status, authenticated=token is not None)
    # GitHub refusing the token itself (not a rate limit): asking again cannot help
    kind = GitHubAccessError if status == 401 or (status == 403 and wait is None) else GitHubError
    error = kind(
        answered(method, display, status, detail, hint),
        status=status,
        method=method,
        path=display,
        detail=detail,
        retry_at_ms=retry_at,
    )
    return error, wait
