"""The fake GitHub's state rendered as GitHub lays out three of its pages, as static HTML.

:func:`environments_page` is the repository's **Deployments** page (each environment's latest
deployment: its state, its status's description, who deployed it, the URL of the active one;
then the history of every deployment); :func:`history_page` is one environment's deployment
history with every status's state, description and time; :func:`issue_page` is an issue (the
release dashboard, an approval issue) with its markdown rendered as GitHub renders an issue's
(``markdown_it``: CommonMark, tables, line breaks; no raw HTML, no images; HTML comments are
hidden as GitHub hides them).

Everything from the fake — logins, descriptions, names, titles, bodies, URLs — is untrusted:
the templates escape it (Jinja's autoescape), markdown is rendered with raw HTML off (so
``<script>`` in a body is text), and each page's Content-Security-Policy forbids scripts,
requests and every source but its inline style. Links to the fake's own address are shown as
GitHub's (``story.SERVER``): the fake serves its pages where its API is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markupsafe import Markup

from tests.fake_github.pictures.story import SERVER, Snapshot

HERE = Path(__file__).resolve().parent
_JINJA = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
#: GitHub's issue markdown: CommonMark with tables, a newline is a line break; raw HTML is
#: off (it would be text), images are off (a page loads nothing)
_MD = MarkdownIt("commonmark", {"html": False, "breaks": True}).enable("table").disable("image")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
#: a code span longer than this may break anywhere (a URL in a table cell), shorter ones at
#: spaces only: a table's columns stay readable within the page
LONG_CODE = 40


def _code_inline(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    content = tokens[idx].content
    long = ' class="long"' if len(content) > LONG_CODE else ""
    return f"<code{long}>{escapeHtml(content)}</code>"


_MD.add_render_rule("code_inline", _code_inline)
#: a deployment status's state -> GitHub's label for it and its colour
LABELS = {
    "success": ("Success", "green"),
    "failure": ("Failure", "red"),
    "error": ("Error", "red"),
    "inactive": ("Inactive", "grey"),
    "in_progress": ("In progress", "yellow"),
    "queued": ("Queued", "yellow"),
    "pending": ("Pending", "yellow"),
}


def markdown(text: str) -> Markup:
    """An issue's or comment's body as GitHub shows it: comments hidden, the rest rendered
    with raw HTML off (so it is escaped), no images."""
    return Markup(_MD.render(_COMMENT.sub("", text)))  # markdown_it escaped it


def ms_of(stamp: str | int) -> int:
    """An ISO stamp (``…Z``) or epoch milliseconds, as milliseconds."""
    if isinstance(stamp, int):
        return stamp
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def ago(stamp: str | int, now_ms: int) -> str:
    """GitHub's relative time: ``now``, ``3 minutes ago``, ``2 days ago``, then the date."""
    seconds = max(0, (now_ms - ms_of(stamp)) // 1000)
    for size, unit in ((86_400 * 30, ""), (86_400, "day"), (3600, "hour"), (60, "minute")):
        if seconds >= size:
            if not unit:
                return "on " + utc(stamp, "%b %-d, %Y")
            n = seconds // size
            return f"{n} {unit}{'s' if n > 1 else ''} ago"
    return "now"


def utc(stamp: str | int, form: str = "%b %-d, %H:%M:%S UTC") -> str:
    return datetime.fromtimestamp(ms_of(stamp) / 1000, tz=UTC).strftime(form)


@dataclass(frozen=True)
class Status:
    state: str
    label: str
    tone: str
    description: str
    creator: str
    when: str
    at: str
    environment_url: str
    log_url: str


@dataclass(frozen=True)
class Deployment:
    id: int
    environment: str
    sha: str
    message: str
    creator: str
    state: str
    label: str
    tone: str
    description: str
    when: str
    statuses: list[Status]
    #: the latest URL a status gave the environment ('' if none did)
    url: str


def _shown(snap: Snapshot, text: str | None) -> str:
    return (text or "").replace(snap.fake_url.rstrip("/"), SERVER)


def _href(snap: Snapshot, url: str | None) -> str:
    """A URL from the fake as a link, only if it is http(s) (no ``javascript:``); else ''."""
    shown = _shown(snap, url).strip()
    return shown if urlsplit(shown).scheme in ("http", "https") else ""


def _status(snap: Snapshot, s: dict[str, Any]) -> Status:
    label, tone = LABELS.get(s["state"], (s["state"], "grey"))
    return Status(s["state"], label, tone, _shown(snap, s["description"]), s["creator"],
                  ago(s["created_at"], snap.now_ms), utc(s["created_at"]),
                  _href(snap, s["environment_url"]), _href(snap, s["log_url"]))  # fmt: skip


def deployments(snap: Snapshot) -> list[Deployment]:
    """Every deployment, newest first, with its statuses oldest first."""
    out = []
    for d in sorted(snap.deployments, key=lambda d: -int(d["id"])):
        statuses = [_status(snap, s) for s in d["statuses"]]
        latest = statuses[-1] if statuses else None
        state = latest.state if latest else "pending"
        label, tone = LABELS.get(state, (state, "grey"))
        urls = [s.environment_url for s in statuses if s.environment_url]
        when = latest.when if latest else ""
        out.append(Deployment(
            int(d["id"]), d["environment"], d["sha"], snap.commits.get(d["sha"], ""),
            d["creator"], state, label, tone, latest.description if latest else "", when,
            statuses, urls[-1] if urls else "",
        ))  # fmt: skip
    return out


@dataclass(frozen=True)
class EnvironmentCard:
    name: str
    latest: Deployment
    #: the environment's active deployment (the newest whose latest status is success)
    active: Deployment | None
    count: int


def environments(snap: Snapshot) -> list[EnvironmentCard]:
    """Each environment with its latest deployment, the most recently deployed first."""
    by_env: dict[str, list[Deployment]] = {}
    for d in deployments(snap):
        by_env.setdefault(d.environment, []).append(d)
    cards = [EnvironmentCard(name, ds[0], next((d for d in ds if d.state == "success"), None),
                             len(ds)) for name, ds in by_env.items()]  # fmt: skip
    return sorted(cards, key=lambda c: -c.latest.id)


def _page(template: str, snap: Snapshot, **values: Any) -> str:
    return _JINJA.get_template(template).render(repo=snap.repo, server=SERVER, **values)


def environments_page(snap: Snapshot) -> str:
    """The repository's Deployments page: environments, then the deployment history."""
    return _page("environments.html", snap, cards=environments(snap),
                 history=deployments(snap))  # fmt: skip


def history_page(snap: Snapshot, environment: str) -> str:
    """One environment's deployments, newest first, each with its statuses."""
    mine = [d for d in deployments(snap) if d.environment == environment]
    names = [c.name for c in environments(snap)]
    return _page("history.html", snap, environment=environment, deployments=mine,
                 environments=names)  # fmt: skip


def issue_page(snap: Snapshot, number: int) -> str:
    """An issue as GitHub shows it: title, state, its body and comments rendered."""
    (issue,) = [i for i in snap.issues if int(i["number"]) == number]
    comments = [
        {"user": c["user"], "when": ago(c["created_ms"], snap.now_ms),
         "body": markdown(_shown(snap, c["body"]))}
        for c in snap.comments.get(number, [])
    ]  # fmt: skip
    return _page(
        "issue.html", snap, issue=issue, body=markdown(_shown(snap, issue["body"])),
        opened=ago(issue["created_ms"], snap.now_ms), comments=comments,
        closed=ago(issue["closed_ms"], snap.now_ms) if issue["closed_ms"] else "",
    )  # fmt: skip
