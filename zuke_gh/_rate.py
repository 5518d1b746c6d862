"""What GitHub says is left of this token's hourly request budget: the read budget a sweep asks.

Every answer carries ``x-ratelimit-limit``, ``-remaining``, ``-reset`` and
``-resource`` (``core`` for REST, ``graphql`` for GraphQL points): GitHub's
own count, over every process and job that spends the same budget — and for
a workflow's ``GITHUB_TOKEN`` that budget is the repository's, 1,000
requests an hour however many jobs (each with a fresh token) share it
(docs.github.com "Rate limits for the REST API" § primary rate limit for
GITHUB_TOKEN; "Rate limits and query limits for the GraphQL API"). A count
kept in one process could not see the others, so the client keeps the last
reading per resource instead, and a sweep asks :meth:`RateReadings.affords`
before reads it can put off: it plans to spend at most :data:`PLAN_SHARE` of
the hour's limit, leaving the rest to the token's other users, and defers
what does not fit to the next sweep (as it defers writes:
:mod:`zuke_gh._pacing`). Before the first answer nothing is known, and a read
is afforded.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import httpx

from zuke._clock import iso

#: The share of the hour's limit a sweep may plan to spend (the rest is the token's other users').
PLAN_SHARE = 0.8


@dataclass(frozen=True)
class Reading:
    """One resource's budget as GitHub last said it."""

    limit: int
    remaining: int
    #: when the window resets (epoch seconds, GitHub's clock)
    reset_s: int

    @property
    def used(self) -> int:
        return max(0, self.limit - self.remaining)


def _int(headers: httpx.Headers, name: str) -> int | None:
    try:
        return int(headers.get(name, ""))
    except ValueError:
        return None


class RateReadings:
    """The last reading of each rate-limit resource one client's answers carried."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._readings: dict[str, Reading] = {}

    def note(self, headers: httpx.Headers) -> None:
        """Keep what an answer says (an answer without the headers changes nothing)."""
        limit, left = _int(headers, "x-ratelimit-limit"), _int(headers, "x-ratelimit-remaining")
        if limit is None or left is None or limit <= 0:
            return
        resource = headers.get("x-ratelimit-resource") or "core"
        with self._lock:
            self._readings[resource] = Reading(limit, left, _int(headers, "x-ratelimit-reset") or 0)

    def reading(self, resource: str) -> Reading | None:
        with self._lock:
            return self._readings.get(resource)

    def affords(self, resource: str, requests: int) -> bool:
        """Whether ``requests`` more fit the share of the hour a sweep may plan (always, before
        GitHub said anything about ``resource``)."""
        found = self.reading(resource)
        if found is None:
            return True
        return found.used + requests <= int(found.limit * PLAN_SHARE)

    def refusal(self, resource: str, what: str) -> str:
        """Why ``what`` is put off: the budget GitHub reported, and when it resets."""
        found = self.reading(resource)
        if found is None:
            return f"{what} is put off"
        when = iso(found.reset_s * 1000) if found.reset_s else "the next hour"
        return (f"{what} is put off to the next sweep: GitHub's `{resource}` budget has "
                f"{found.remaining} of {found.limit} left until {when}, and a sweep plans no "
                f"more than {int(PLAN_SHARE * 100)}% of it")  # fmt: skip
