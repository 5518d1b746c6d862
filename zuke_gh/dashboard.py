"""The release dashboard: one issue per repository listing what waits, kept by the sweep.

Core zuke never imports ``zuke_gh``, so the dashboard is its own step after a sweep:
``python -m zuke_gh.dashboard`` (the Action runs it after ``zuke resume --check``), or
:func:`keep_dashboard` from Python. It reads the run store the environment names
(``ZUKE_STATE``, ``ZUKE_STATE_DIR``, … as every zuke command: :mod:`zuke.state.resolve`) and
writes to ``GITHUB_REPOSITORY`` (``ZUKE_DASHBOARD_REPO`` wins) with the token zuke uses
(``GH_TOKEN``, ``GITHUB_TOKEN`` or a GitHub App).

One sweep, at most one write after the dashboard exists:

1. the records of every suspended run (the branch store reads a listing's records
   together), and the listing's rows of the last few finished runs;
2. the text (:mod:`zuke_gh._dashboard_view`), with every value redacted and inert;
3. the issue, found again by zuke's marker *and* author (:mod:`zuke_gh._dashboard_issue`);
4. nothing more if its text is the same (the last line, the date of the sweep that wrote
   it, does not count) and it is open and labelled; else one edit — or, the first time,
   opening it and pinning it — each inside the write budget (the branch store's, seeded
   from its commits, else the client's pacer): a write the hour cannot afford waits for a
   later sweep, said, not an error.

``ZUKE_DASHBOARD=false`` (or ``off``, ``0``, ``no``; the Action's ``dashboard: "false"``) turns
it off; ``ZUKE_DASHBOARD_FINISHED`` is how many finished runs it lists (5; 0 to 50).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TextIO

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._errors import ZukeError
from zuke._inert import console_line, console_text
from zuke._redact import Redactor
from zuke.state._protocol import RunQuery, StateStore
from zuke.state.records import RunRecord
from zuke_gh import _dashboard_issue as issue
from zuke_gh import _dashboard_view as view
from zuke_gh._approval_api import Repo
from zuke_gh._identity import identity
from zuke_gh._paths import repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError, transient

OFF = ("false", "off", "0", "no")
DEFAULT_FINISHED = 5
MAX_FINISHED = 50
_SERVER = re.compile(
    r"(?:https://[A-Za-z0-9.-]+|http://(?:127\.0\.0\.1|localhost))(?::[0-9]{1,5})?"
)

Action = Literal["created", "edited", "unchanged", "deferred"]


@dataclass(frozen=True)
class DashboardOutcome:
    """What one sweep did to the dashboard: ``writes`` it made, its issue, and a note (a pin
    GitHub refused, a write the budget deferred)."""

    action: Action
    number: int | None
    url: str | None
    writes: int
    waiting: int
    note: str = ""


def read_records(store: StateStore, finished: int) -> tuple[list[RunRecord], list[view.Finished]]:
    """The suspended runs' records (oldest first) and the ``finished`` runs that ended last
    (their listing rows: no record is read for them)."""
    summaries = store.list_runs(RunQuery())
    waiting: list[RunRecord] = []
    for s in summaries:
        if s.status != "suspended":
            continue
        found = store.get_run(s.id)
        if found is not None and found.record.status == "suspended":
            waiting.append(found.record)
    waiting.sort(key=lambda r: (r.created_at, r.id))
    return waiting, view.last_ended(summaries, finished)


def keep_dashboard(
    store: StateStore,
    client: GitHubClient,
    repository: str,
    *,
    server: str = "https://github.com",
    job_url: str | None = None,
    finished: int = DEFAULT_FINISHED,
    redact: Callable[[str], str] = lambda text: text,
    clock: Clock = SYSTEM_CLOCK,
) -> DashboardOutcome:
    """Bring the dashboard of ``repository`` up to date with ``store`` (see the module)."""
    owner, name = repo_slug(repository)
    repo = Repo(owner, name)
    waiting_records, ended = read_records(store, finished)
    gates = [g for r in waiting_records for g in view.waiting_gates(r, server)]
    text = view.content(repo.slug, gates, ended, redact)
    reserve: Callable[[int], bool] = getattr(store, "reserve_writes", None) or \
        client.reserve_writes  # fmt: skip
    found = issue.find(client, repo, identity(client))
    if found is None:
        return _open(client, repo, text, clock, job_url, reserve, len(gates))
    number = found.get("number")
    assert isinstance(number, int)
    url = found.get("html_url") if isinstance(found.get("html_url"), str) else None
    patch = issue.needs_edit(found)
    written = found.get("body") if isinstance(found.get("body"), str) else ""
    if view.content_of(str(written)) != text:
        patch["body"] = view.body(text, clock.now_ms(), job_url)
    if not patch:
        return DashboardOutcome("unchanged", number, str(url), 0, len(gates))
    if not reserve(1):
        return DashboardOutcome("deferred", number, str(url), 0, len(gates),
                                "the write budget of this hour is spent: a later sweep edits "
                                "it")  # fmt: skip
    issue.edit(client, repo, number, patch)
    return DashboardOutcome("edited", number, str(url), 1, len(gates))


def _open(
    client: GitHubClient, repo: Repo, text: str, clock: Clock, job_url: str | None,
    reserve: Callable[[int], bool], waiting: int,
) -> DashboardOutcome:  # fmt: skip
    if not reserve(1):
        return DashboardOutcome("deferred", None, None, 0, waiting, "the write budget of this "
                                "hour is spent: a later sweep opens it")  # fmt: skip
    made = issue.open_issue(client, repo, view.body(text, clock.now_ms(), job_url))
    number, url, node = made.get("number"), made.get("html_url"), made.get("node_id")
    writes, note = 1, ""
    if not isinstance(node, str):
        note = "not pinned: GitHub's answer named no node id"
    elif not reserve(1):
        note = "not pinned: the write budget of this hour is spent"
    else:
        writes += 1
        try:
            refused = issue.pin(client, node)
        except GitHubError as exc:  # a refusal, an outage: the dashboard is open all the same
            refused = str(exc)
        note = f"not pinned: {refused}" if refused else "pinned"
    return DashboardOutcome("created", number if isinstance(number, int) else None,
                            url if isinstance(url, str) else None, writes, waiting,
                            note)  # fmt: skip


# -- python -m zuke_gh.dashboard ------------------------------------------------------------------


class DashboardSettingError(ZukeError):
    """An environment setting the dashboard cannot use (exit 2)."""


def turned_off(env: Mapping[str, str]) -> bool:
    return env.get("ZUKE_DASHBOARD", "").strip().lower() in OFF


def settings(env: Mapping[str, str]) -> tuple[str, str, str | None, int]:
    """(repository, server, the job's URL, finished runs to list) from ``env``."""
    repository = (env.get("ZUKE_DASHBOARD_REPO") or env.get("GITHUB_REPOSITORY") or "").strip()
    if not repository:
        raise DashboardSettingError(
            "set GITHUB_REPOSITORY (or ZUKE_DASHBOARD_REPO) to the repository whose dashboard "
            "to keep, as owner/name"
        )
    try:
        repo_slug(repository)
    except GitHubError as exc:
        raise DashboardSettingError(str(exc)) from None
    server = (env.get("GITHUB_SERVER_URL") or "https://github.com").strip().rstrip("/")
    if not _SERVER.fullmatch(server):
        raise DashboardSettingError(f"GITHUB_SERVER_URL={console_text(server)!s} is not a "
                                    "plain https:// address")  # fmt: skip
    run_id = env.get("GITHUB_RUN_ID", "").strip()
    origin = env.get("GITHUB_REPOSITORY", "").strip()
    job_url = f"{server}/{origin}/actions/runs/{run_id}" if run_id.isdigit() and re.fullmatch(
        r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+", origin) else None  # fmt: skip
    raw = env.get("ZUKE_DASHBOARD_FINISHED", "").strip() or str(DEFAULT_FINISHED)
    if not raw.isdigit() or int(raw) > MAX_FINISHED:
        raise DashboardSettingError(f"ZUKE_DASHBOARD_FINISHED={console_text(raw)}: expected a "
                                    f"whole number from 0 to {MAX_FINISHED}")  # fmt: skip
    return repository, server, job_url, int(raw)


def main(env: Mapping[str, str] | None = None) -> int:
    """``python -m zuke_gh.dashboard``: :func:`keep` on this process's environment."""
    return keep(os.environ if env is None else env)


def keep(
    env: Mapping[str, str],
    *,
    store: StateStore | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Keep the dashboard the environment names: one line on ``out``, or one ``zuke:`` line
    on ``err`` (2: a setting; 1: GitHub or the store refused; a lost answer or a rate limit
    is a warning, 0: the next sweep tries again). ``store``: the sweep's own, which stays
    open (else the environment's, closed at the end)."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if turned_off(env):
        out.write("zuke: dashboard: off (ZUKE_DASHBOARD)\n")
        return 0
    from zuke.state.resolve import resolve_store

    secrets = [env.get(k, "") for k in ("GH_TOKEN", "GITHUB_TOKEN", "ZUKE_STATE_TOKEN")]
    redact = Redactor([s for s in secrets if len(s) >= 8]).text
    own = store is None
    try:
        repository, server, job_url, finished = settings(env)
        if store is None:
            store = resolve_store(override=None, env=env, required=True, reading=True)
        assert store is not None
    except ZukeError as exc:
        return _said(err, f"zuke: dashboard: {exc}", redact, 2)
    try:
        with GitHubClient.from_env(env) as client:
            done = keep_dashboard(store, client, repository, server=server, job_url=job_url,
                                  finished=finished, redact=redact)  # fmt: skip
    except GitHubError as exc:
        if transient(exc):
            return _said(err, f"zuke: warning: dashboard not updated ({exc}); the next sweep "
                         "tries again", redact, 0)  # fmt: skip
        hint = ("the job needs `issues: write`; or turn the dashboard off: the Action's "
                'dashboard: "false", or ZUKE_DASHBOARD=false')  # fmt: skip
        return _said(err, f"zuke: dashboard: {exc} ({hint})", redact, 1)
    except ZukeError as exc:
        return _said(err, f"zuke: dashboard: {exc}", redact, 1)
    finally:
        close = getattr(store, "close", None)
        if own and callable(close):
            close()
    where = f" #{done.number}" if done.number is not None else ""
    note = f"; {done.note}" if done.note else ""
    out.write(console_line(redact(f"zuke: dashboard{where}: {done.action}, {done.waiting} "
                                  f"waiting, {done.writes} writes{note}")) + "\n")  # fmt: skip
    return 0


def _said(err: TextIO, line: str, redact: Callable[[str], str], code: int) -> int:
    err.write(console_line(redact(line)) + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
