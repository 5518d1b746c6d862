"""The pictures of ``docs/github.md`` (``tests/fake_github/pictures``) show what GitHub would.

One real release story (``story.tell``: real ``zuke`` processes against the fake GitHub, ~5 s)
for the module, plus what an adversary could put into GitHub's state — a deployment whose
environment, description and URL are markup, a commenter whose login and comment are — then
each page rendered from the fake's state and read back: environment names, each one's latest
state, the 140-character descriptions, the dashboard's waiting row; every untrusted string
shown as text. The Chromium part (``shots.shoot``) is marked ``ui`` and skips without
Chromium unless ``ZUKE_REQUIRE_BROWSER=1``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.deploy_support import REPO, deploy_github
from tests.fake_github.pictures.pages import environments_page, history_page, issue_page
from tests.fake_github.pictures.story import SERVER, Snapshot, Story, snapshot, tell
from tests.ui.browser.support import require_chromium

# the story spawns real zuke processes: with the e2e tests, on one worker under --dist loadgroup
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("e2e")]

SCRIPT = "<script>alert(1)</script>"
HOSTILE_ENV = "review-<b>x</b>"
HOSTILE_LOGIN = "<img src=x onerror=alert(2)>"
HOSTILE_COMMENT = f"{SCRIPT} <img src=x onerror=alert(3)> [click](javascript:alert(4)) ![i](http://203.0.113.9/t.png)"


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    #: text and elements, in document order
    items: list[str | Node] = field(default_factory=list)

    @property
    def children(self) -> list[Node]:
        return [i for i in self.items if isinstance(i, Node)]

    def text(self) -> str:
        """Everything the element shows, in order, whitespace collapsed."""
        parts = [i if isinstance(i, str) else i.text() for i in self.items]
        return " ".join(" ".join(parts).split())

    def all(self, attr: str, value: str | None = None) -> list[Node]:
        """The elements below (and with) this one that have ``attr`` (equal to ``value``)."""
        mine = attr in self.attrs and (value is None or self.attrs[attr] == value)
        return [self] * mine + [n for c in self.children for n in c.all(attr, value)]


class _Tree(HTMLParser):
    VOID = {"meta", "br", "hr", "img", "input", "link"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].items.append(node)
        if tag not in self.VOID:
            self.stack.append(node)

    def handle_endtag(self, tag: str) -> None:
        while len(self.stack) > 1 and self.stack.pop().tag != tag:
            pass

    def handle_data(self, data: str) -> None:
        self.stack[-1].items.append(data)


def parse(html: str) -> Node:
    tree = _Tree()
    tree.feed(html)
    tree.close()
    return tree.root


def _hostile(gh: FakeGitHub, story: Story) -> None:
    """What others can put into GitHub's state: a deployment whose texts are markup (anyone
    with ``deployments: write``), and a commenter on the approval issue."""
    headers = {"Authorization": f"Bearer {gh.token}"}
    with httpx.Client(base_url=gh.url, headers=headers, timeout=10) as api:
        made = api.post(f"/repos/{REPO}/deployments", json={
            "ref": "main", "environment": HOSTILE_ENV, "description": SCRIPT,
            "auto_merge": False, "required_contexts": []})  # fmt: skip
        assert made.status_code == 201, made.text
        status = api.post(f"/repos/{REPO}/deployments/{made.json()['id']}/statuses", json={
            "state": "failure", "description": SCRIPT, "environment_url": "javascript:alert(5)",
            "log_url": "https://example.com/log"})  # fmt: skip
        assert status.status_code == 201, status.text
    gh.add_user(HOSTILE_LOGIN)
    gh.set_permission(REPO, HOSTILE_LOGIN, "read")
    gh.comment(REPO, story.approval, HOSTILE_LOGIN, HOSTILE_COMMENT)


@dataclass(frozen=True)
class Told:
    story: Story
    snap: Snapshot
    fake_url: str


@pytest.fixture(scope="module")
def told(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Told]:
    with deploy_github() as gh:
        story = tell(gh, tmp_path_factory.mktemp("story"))
        _hostile(gh, story)
        yield Told(story, snapshot(gh), gh.url)


def _deployment_states(snap: Snapshot, environment: str) -> list[str]:
    """The latest state of each deployment to ``environment``, newest first (the fake's)."""
    mine = [d for d in snap.deployments if d["environment"] == environment]
    return [d["statuses"][-1]["state"] for d in sorted(mine, key=lambda d: -d["id"])]


def test_the_environments_page_shows_each_environments_latest_deployment(told: Told) -> None:
    page = parse(environments_page(told.snap))
    cards = {c.attrs["data-environment"]: c for c in page.all("data-environment")}
    assert set(cards) == {"staging", "production", HOSTILE_ENV}
    assert cards["staging"].attrs["data-state"] == "success"
    assert cards["production"].attrs["data-state"] == "pending"  # waiting at the approval gate
    waiting = cards["production"].all("data-description")[0].text()
    assert waiting.startswith("waiting at approve since ")
    assert "1 of 2 approvals (@alice)" in waiting
    assert len(waiting) == 140 and waiting.endswith("…")  # GitHub's limit, cut by zuke
    assert "deployed by github-actions[bot]" in cards["production"].text()
    # the URL of the environment's active deployment (the finished run's), not the waiting one
    assert [a.attrs["href"] for a in cards["production"].all("data-url")] == [
        "https://app.example.com"
    ]
    assert [a.attrs["href"] for a in cards["staging"].all("data-url")] == [
        "https://staging.example.com"
    ]
    rows = page.all("data-deployment")
    assert len(rows) == len(told.snap.deployments) == 7  # 3 runs, 2 environments each; the hostile


def test_an_environments_history_shows_every_status_with_its_description(told: Told) -> None:
    page = parse(history_page(told.snap, "production"))
    deployments = page.all("data-deployment")
    assert [d.attrs["data-state"] for d in deployments] == ["pending", "inactive", "success"]
    assert [d.attrs["data-state"] for d in deployments] == _deployment_states(
        told.snap, "production"
    )
    newest = sorted((d for d in told.snap.deployments if d["environment"] == "production"),
                    key=lambda d: -d["id"])  # fmt: skip
    for shown, held in zip(deployments, newest, strict=True):
        statuses = shown.all("data-status")
        assert [s.attrs["data-status"] for s in statuses] == [s["state"] for s in held["statuses"]]
        assert [s.all("data-description")[0].text() for s in statuses] == [
            " ".join(s["description"].split()) or "—" for s in held["statuses"]
        ]
    cancelled = deployments[1].all("data-status")
    assert cancelled[-1].text().startswith(f"Inactive cancelled: run {told.story.cancelled}")


def test_the_dashboard_issue_shows_the_waiting_row_and_the_finished_runs(told: Told) -> None:
    html = issue_page(told.snap, told.story.dashboard)
    page = parse(html)
    body = page.all("data-body")[0]
    waiting, finished = _tables(body)
    assert len(waiting) == 2  # the header and one waiting run
    row = [c.text() for c in waiting[1]]
    assert row[0] == told.story.waiting and row[2] == "approve"
    assert "1 of 2 approvals (@alice)" in row[3]
    assert f"{SERVER}/{REPO}/issues/{told.story.approval}" in row[3]  # the fake's address, shown
    assert [r[0].text() for r in finished[1:]] == [told.story.cancelled, told.story.finished]
    assert [r[2].text() for r in finished[1:]] == ["cancelled", "succeeded"]
    assert page.all("data-pinned") and "zuke" in page.text()
    assert page.all("data-state", "open")
    assert "zuke-dashboard" not in html  # zuke's marker is an HTML comment: hidden, as on GitHub
    assert told.fake_url not in html


def _tables(body: Node) -> list[list[list[Node]]]:
    """Each table below ``body`` as rows of cells (the header row first)."""
    out = []
    for table in _tags(body, "table"):
        out.append([_tags(tr, "th") or _tags(tr, "td") for tr in _tags(table, "tr")])
    return out


def _tags(node: Node, tag: str) -> list[Node]:
    return [n for c in node.children for n in ([c] if c.tag == tag else _tags(c, tag))]


def test_untrusted_text_from_the_fake_is_shown_as_text(told: Told) -> None:
    pages = [environments_page(told.snap), history_page(told.snap, HOSTILE_ENV),
             issue_page(told.snap, told.story.approval)]  # fmt: skip
    for html in pages:
        tree = parse(html)
        assert not _tags(tree, "script") and not _tags(tree, "img"), html
        assert not any(b.text() == "x" for b in _tags(tree, "b"))  # HOSTILE_ENV: text
        nodes = _all_nodes(tree)
        assert not [n for n in nodes if "src" in n.attrs]  # a page loads nothing
        assert not [n for n in nodes if n.attrs.get("href", "").startswith("javascript")]
    environments, history, approval = (parse(h).text() for h in pages)
    assert SCRIPT in environments and HOSTILE_ENV in environments  # shown, as text
    assert SCRIPT in history and "&lt;script&gt;" in pages[1]
    assert HOSTILE_LOGIN in approval and SCRIPT in approval
    assert "javascript:alert(5)" not in pages[0] + pages[1]  # no link, no text for it


def _all_nodes(node: Node) -> list[Node]:
    return [node] + [n for c in node.children for n in _all_nodes(c)]


@pytest.mark.ui
def test_the_screenshots_are_small_pngs_of_the_pages(told: Told, tmp_path: Path) -> None:
    require_chromium()
    # here, not at the top: shots imports Playwright (0.17 s), and every xdist worker of the
    # inner loop collected this file to deselect it (issue 28 §7)
    from tests.fake_github.pictures.shots import WIDTH, pages_of, shoot

    saved = shoot(pages_of(told.snap, told.story), tmp_path)
    assert [p.name for p in saved] == ["github-environments.png",
                                       "github-deployment-history.png",
                                       "github-dashboard-issue.png",
                                       "github-approval-issue.png"]  # fmt: skip
    for path in saved:
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        width, height = struct.unpack(">II", data[16:24])  # IHDR
        assert width == WIDTH and 400 < height <= 1500
        assert len(data) < 200 * 1024, f"{path.name}: {len(data)} bytes"
