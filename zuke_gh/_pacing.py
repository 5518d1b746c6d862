"""GitHub's content-creation limits, kept on this side of the wire.

GitHub allows at most 80 content-creating requests a minute and 500 an hour
per token, past which it answers 403/429 with ``retry-after``, and asks
integrations to leave at least a second between them and to send them one at
a time (docs.github.com "Rate limits for the REST API" § secondary rate limits;
"Best practices for using the REST API" § avoid concurrent requests, pause
between mutative requests; "Rate limits and query limits for the GraphQL API"
§ staying under the rate limit). A :class:`WritePacer` makes a process do
that: its writes (REST POST, PATCH, PUT, DELETE and GraphQL mutations; reads
are not paced) go one at a time, at least ``min_gap_s`` apart, at most
``per_minute`` in any minute and ``per_hour`` in any hour.

It also keeps a smaller **budget** (``ZUKE_GITHUB_WRITES_PER_HOUR``, 400 by
default: headroom under GitHub's 500 for the token's other users) that a
planner asks before it starts something it must not leave half done: a sweep
resumes a run only if :meth:`WritePacer.reserve` says its writes fit, and
defers the rest to the next sweep. A pacer can be seeded with the times of
writes an earlier process made (the state branch's commits), so a sweep every
15 minutes does not spend the same hour twice.

Waits longer than :data:`NOTICE_AFTER_S` are never silent: one line goes to
the notice callback (stderr by default), without any secret.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from zuke._clock import SYSTEM_CLOCK, Clock, parse_iso
from zuke_gh.errors import GitHubError

MINUTE_MS = 60_000
HOUR_MS = 3_600_000
#: GitHub's content-creation limits per token (docs: "Rate limits for the REST API").
GITHUB_WRITES_PER_MINUTE = 80
GITHUB_WRITES_PER_HOUR = 500
#: What a planner may spend in an hour unless ``ZUKE_GITHUB_WRITES_PER_HOUR`` says otherwise.
DEFAULT_WRITES_PER_HOUR = 400
#: A wait longer than this says so (once) on the notice callback.
NOTICE_AFTER_S = 2.0

#: A GraphQL document whose first operation is a mutation (comments and whitespace first).
_MUTATION = re.compile(r"\A(?:\s|#[^\n]*\n?)*mutation\b")

BUDGET_VAR = "ZUKE_GITHUB_WRITES_PER_HOUR"
PACING_VAR = "ZUKE_GITHUB_PACING"

Notice = Callable[[str], None]


def is_mutation(query: str) -> bool:
    """Whether a GraphQL document is a mutation (a write, paced) rather than a query."""
    return _MUTATION.match(query) is not None


class ProcessPacer:
    """A client's default ``pacer``: the process's own for its base URL (``process_pacer``)."""


PROCESS_PACER = ProcessPacer()


def stderr_notice(line: str) -> None:
    """The default notice: one line on stderr (the terminal, or the Actions log)."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def clock_text(ms: int) -> str:
    """``12:03:05 UTC``."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%H:%M:%S UTC")


def wait_line(what: str, wait_s: float, until_ms: int, why: str = "") -> str:
    """``zuke: GitHub rate limit: waiting 42 s (until 12:03:05 UTC)``."""
    extra = f"; {why}" if why else ""
    return f"zuke: {what}: waiting {wait_s:.0f} s (until {clock_text(until_ms)}{extra})"


@dataclass(frozen=True)
class PacingSettings:
    """How a process paces its writes; the defaults are GitHub's limits."""

    min_gap_s: float = 1.0
    per_minute: int = GITHUB_WRITES_PER_MINUTE
    #: the hard ceiling: a write past it waits (or fails, if the wait does not fit)
    per_hour: int = GITHUB_WRITES_PER_HOUR
    #: what :meth:`WritePacer.reserve` lets a planner spend in an hour
    budget_per_hour: int = DEFAULT_WRITES_PER_HOUR

    def __post_init__(self) -> None:
        if self.min_gap_s < 0 or self.per_minute < 1 or self.per_hour < 1:
            raise ValueError("PacingSettings needs min_gap_s >= 0 and positive limits")
        if not 0 <= self.budget_per_hour <= self.per_hour:
            raise ValueError("PacingSettings needs 0 <= budget_per_hour <= per_hour")


class WritePacer:
    """One process's (or one token's) writes to GitHub: serialised, spaced, counted.

    Thread-safe: the store's heartbeats and a gate's dispatch share it. The
    clock and the sleep are injectable, so tests never wait for real.
    """

    def __init__(
        self,
        settings: PacingSettings | None = None,
        *,
        clock: Clock = SYSTEM_CLOCK,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.settings = settings or PacingSettings()
        self._clock, self._sleep = clock, sleep
        self._lock = threading.RLock()  # held across each write: one at a time
        self._stamps: deque[int] = deque()  # this process's writes, oldest first
        self._earlier: list[int] = []  # writes seeded from elsewhere (earlier processes)
        self._first_own: int | None = None

    # -- pacing a write ----------------------------------------------------------------------

    @contextmanager
    def slot(self, *, max_wait_s: float, what: str, notice: Notice | None) -> Iterator[None]:
        """Hold the write slot for one request: wait until it may go (saying so if long).

        A wait longer than ``max_wait_s`` (the caller's retry budget) is not
        slept: an unsent :class:`GitHubError` says when a write may go again.
        """
        with self._lock:
            now = self._clock.now_ms()
            wait_ms, why = self._wait_ms(now)
            if wait_ms > max_wait_s * 1000:
                until = now + wait_ms
                raise GitHubError(
                    f"GitHub's write limit: {why}; the next write of {what} may go at "
                    f"{clock_text(until)} (in {wait_ms / 1000:.0f} s; this client waits at most "
                    f"{max_wait_s:.0f} s). Spread the work out, or raise {BUDGET_VAR} only if "
                    "nothing else writes with this token.",
                    unsent=True,
                    retry_at_ms=until,
                )
            if wait_ms > 0:
                if notice is not None and wait_ms > NOTICE_AFTER_S * 1000:
                    notice(wait_line("GitHub write pacing", wait_ms / 1000, now + wait_ms, why))
                self._sleep(wait_ms / 1000)
            stamp = self._clock.now_ms()
            self._stamps.append(stamp)
            if self._first_own is None:
                self._first_own = stamp
            try:
                yield
            finally:  # the next write's second counts from this one's answer: whatever the
                self._stamps[-1] = max(stamp, self._clock.now_ms())  # network, a second apart

    def _wait_ms(self, now: int) -> tuple[int, str]:
        """How long the next write must wait, and why (the tightest rule wins)."""
        s = self.settings
        stamps = self._window(now)
        wait, why = 0, ""
        if self._stamps:
            gap = self._stamps[-1] + int(s.min_gap_s * 1000) - now
            if gap > 0:
                wait, why = gap, f"at least {s.min_gap_s:g} s between writes"
        minute = [t for t in stamps if t > now - MINUTE_MS]
        if len(minute) >= s.per_minute:
            until = minute[len(minute) - s.per_minute] + MINUTE_MS - now
            if until > wait:
                wait, why = until, f"{len(minute)} writes in the last minute (limit {s.per_minute})"
        if len(stamps) >= s.per_hour:
            until = stamps[len(stamps) - s.per_hour] + HOUR_MS - now
            if until > wait:
                wait, why = until, f"{len(stamps)} writes in the last hour (limit {s.per_hour})"
        return wait, why

    def _window(self, now: int) -> list[int]:
        """Every write of the last hour this pacer knows of, oldest first."""
        while self._stamps and self._stamps[0] <= now - HOUR_MS:
            self._stamps.popleft()
        first = self._first_own
        earlier = [t for t in self._earlier if t > now - HOUR_MS and (first is None or t < first)]
        return sorted([*earlier, *self._stamps])

    # -- the budget --------------------------------------------------------------------------

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def used(self) -> int:
        """Writes in the last hour (this process's, and any seeded)."""
        with self._lock:
            return len(self._window(self._clock.now_ms()))

    def left(self) -> int:
        """What the hourly budget still affords."""
        return max(0, self.settings.budget_per_hour - self.used())

    def reserve(self, writes: int) -> bool:
        """Whether ``writes`` more fit this hour's budget now (a planner asks before it starts
        something it must not leave half done). Nothing is held: the writes count as they go."""
        return writes <= self.left()

    def seed(self, stamps_ms: Iterable[int]) -> None:
        """Count writes another process made (epoch ms) against this hour's limits.

        Seeds at or after this process's own first write are its own, seen again: ignored.
        """
        # A multiset: commit dates have whole seconds, so writes in one second share a stamp
        # and each must count; the union (not the sum) keeps a seed given twice counted once.
        with self._lock:
            self._earlier = sorted((Counter(self._earlier) | Counter(stamps_ms)).elements())


# -- a state branch's budget --------------------------------------------------------------------


class BranchBudget:
    """The write budget of a store on a branch: the pacer's, seeded once from the branch.

    Each write of the branch store is one commit, so the branch's commits of
    the last hour (``GET /repos/{owner}/{repo}/commits?sha=BRANCH&since=…``, at
    most 5 pages of 100: one request while under 100) are the writes earlier
    processes made — a sweep 15 minutes after another does not spend the same
    hour twice. Commit dates are GitHub's clock, compared with the local one.
    Writes the token made elsewhere (a dispatch) are not on the branch: the
    budget's headroom under GitHub's 500 is for them.
    """

    def __init__(self, client: Any, owner: str, repo: str, branch: str) -> None:
        self._client, self._where = client, (owner, repo, branch)
        self._seeded = False

    def reserve(self, writes: int) -> bool:
        """Whether ``writes`` more fit this hour (always, for an unpaced client)."""
        pacer: WritePacer | None = self._client.pacer
        if pacer is None:
            return True
        if not self._seeded:
            stamps = self._history(pacer)
            if stamps is None:
                return False  # the history cannot be read now: spend nothing on a guess
            pacer.seed(stamps)
            self._seeded = True
        return pacer.reserve(writes)

    def _history(self, pacer: WritePacer) -> list[int] | None:
        """The branch's commit times of the last hour, on the local clock (GitHub's clock
        shifted by the skew the answer's ``Date`` shows); None if they cannot be read."""
        owner, repo, branch = self._where
        where = {"owner": owner, "repo": repo}
        local = pacer.now_ms()
        try:
            skew = 0
            for _ in range(2):  # again if GitHub's clock is minutes off this one
                params = {"sha": branch, "since": _stamp(local + skew - HOUR_MS), "per_page": 100}
                first = self._client.get("/repos/{owner}/{repo}/commits", params=params, **where)
                seen = first.server_time_ms
                if seen is None or abs(seen - local - skew) < MINUTE_MS:
                    break
                skew = seen - local
            items = list(first.body) if isinstance(first.body, list) else []
            if first.next_url is not None:
                more = {**params, "page": 2}
                items += self._client.paginate("/repos/{owner}/{repo}/commits", params=more,
                                               max_pages=4, **where)  # fmt: skip
        except GitHubError as exc:
            if exc.status in (404, 409):  # no branch yet, an empty repository: no history
                return []
            return None
        stamps = [_committed(item) for item in items]
        return [t - skew for t in stamps if t is not None]


def _stamp(ms: int) -> str:
    return datetime.fromtimestamp(ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _committed(item: Any) -> int | None:
    commit = item.get("commit") if isinstance(item, dict) else None
    committer = commit.get("committer") if isinstance(commit, dict) else None
    date = committer.get("date") if isinstance(committer, dict) else None
    return parse_iso(date) if isinstance(date, str) else None


# -- the process's pacers ------------------------------------------------------------------------

_PACERS: dict[str, WritePacer] = {}
_PACERS_LOCK = threading.Lock()


def _loopback(base_url: str) -> bool:
    host = base_url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def settings_from(env: Mapping[str, str]) -> PacingSettings:
    """The pacing settings ``env`` asks for (``ZUKE_GITHUB_WRITES_PER_HOUR``)."""
    raw = env.get(BUDGET_VAR, "").strip()
    if not raw:
        return PacingSettings()
    if not raw.isdigit() or not 1 <= int(raw) <= GITHUB_WRITES_PER_HOUR:
        raise GitHubError(
            f"{BUDGET_VAR}={raw!r}: expected a whole number of writes an hour from 1 to "
            f"{GITHUB_WRITES_PER_HOUR} (GitHub's limit per token); the default is "
            f"{DEFAULT_WRITES_PER_HOUR}."
        )
    return PacingSettings(budget_per_hour=int(raw))


def chosen(
    pacer: WritePacer | ProcessPacer | None, base_url: str, *, tested: bool
) -> WritePacer | None:
    """A client's pacer: the one given, else the process's (none for an injected transport:
    a test's)."""
    if not isinstance(pacer, ProcessPacer):
        return pacer
    return None if tested else process_pacer(base_url, os.environ)


def process_pacer(base_url: str, env: Mapping[str, str]) -> WritePacer | None:
    """The pacer every client of this process shares for ``base_url``, or None (unpaced).

    ``ZUKE_GITHUB_PACING=off`` turns pacing off (GitHub Enterprise with rate
    limits disabled); a loopback base URL (a test server) is unpaced unless
    ``ZUKE_GITHUB_PACING=on``. One pacer per host and process, whatever the
    token: stricter than GitHub's per-token rule, never looser.
    """
    switch = env.get(PACING_VAR, "").strip().lower()
    if switch not in ("", "on", "off"):
        raise GitHubError(f"{PACING_VAR}={switch!r}: expected on or off.")
    if switch == "off" or (switch == "" and _loopback(base_url)):
        return None
    settings = settings_from(env)
    with _PACERS_LOCK:
        pacer = _PACERS.get(base_url)
        if pacer is None or pacer.settings != settings:
            pacer = _PACERS[base_url] = WritePacer(settings)
        return pacer


__all__ = [
    "DEFAULT_WRITES_PER_HOUR",
    "BranchBudget",
    "PacingSettings",
    "WritePacer",
    "process_pacer",
    "settings_from",
    "stderr_notice",
    "wait_line",
]
