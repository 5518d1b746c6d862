"""The ``github_approval`` gate against adversaries, between real ``zuke`` processes and the
fake GitHub (issue 24's acceptance): the starter's own ``/approve`` when a bot's sweep reaches
the gate, a lost issue POST and a copy of the issue, a burst of comments, a ``/deny`` full of
workflow commands, HTML and links, a secret inside another parameter, and a token GitHub
refuses. Every wait is on an observable event (a process exiting)."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import (
    REPO,
    SECRET,
    STARTER,
    env_for,
    fake_github,
    issue_of,
    promoted,
    release,
    said,
)
from tests.e2e.losing_proxy import LosingProxy
from tests.e2e.resume_support import actions, fs_store, record_of, suspend, sweep
from tests.e2e.support import finish, spawn, write_build

pytestmark = pytest.mark.e2e

BOT = "github-actions[bot]"
RENDER = MarkdownIt("commonmark", {"html": True})


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        fake.add_user("mallory")
        fake.set_permission(REPO, "mallory", "read")  # anyone who can read may open an issue
        yield fake


def rendered_outside_code(markdown: str) -> str:
    """The HTML of ``markdown`` with every code span's content taken out: what is left is what
    zuke itself wrote, and must hold nothing a comment put there."""
    return re.sub(r"<code>.*?</code>", "<code/>", RENDER.render(markdown), flags=re.S)


# -- the starter, when a bot's sweep reaches the gate -------------------------------------

E2E_THEN_APPROVAL = """
    from zuke import Build, parameter, target
    from zuke_gh import github_approval, github_workflow

    class Release(Build):
        @target
        def e2e(self, t):
            return t.waits_for(lambda s: s.on(github_workflow(
                lambda g: g.repo("acme/app").workflow("e2e.yml").ref("main"))).timeout("1h"))

        @target
        def qa(self, t):
            return t.depends_on(self.e2e).waits_for(lambda s: s.on(github_approval(
                lambda a: a.repo("acme/app").role("maintain").approvals(2).no_self_approval()
            )).timeout("1h"))

        @target
        def promote(self, t):
            return t.depends_on(self.qa).executes(lambda: print("promoted"))
"""


def actions_env(gh: FakeGitHub, tmp_path: Path, actor: str) -> dict[str, str]:
    """A job under GitHub Actions that ``actor`` triggered (the release, or a sweep)."""
    base = {k: v for k, v in env_for(gh).items() if k != "ZUKE_ACTOR"}
    return {**base, "GITHUB_ACTIONS": "true", "GITHUB_ACTOR": actor,
            "GITHUB_TRIGGERING_ACTOR": actor, "GITHUB_REPOSITORY": REPO,
            "GITHUB_OUTPUT": str(tmp_path / f"out-{actor}"),
            "GITHUB_STEP_SUMMARY": str(tmp_path / f"summary-{actor}")}  # fmt: skip


def test_the_starters_approve_is_refused_when_a_bots_sweep_reaches_the_gate(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    gh.add_workflow(REPO, "e2e.yml", inputs={"zuke_marker": {"required": False}},
                    run_name="${{ inputs.zuke_marker }}")  # fmt: skip
    write_build(tmp_path, E2E_THEN_APPROVAL)
    run_id = suspend(tmp_path, ["promote"], actions_env(gh, tmp_path, STARTER))
    (dispatched,) = [r for r in gh.dispatched(REPO) if run_id in (r["display_title"] or "")]
    gh.complete_run(dispatched["id"])
    bot = actions_env(gh, tmp_path, BOT)
    code, summary = sweep(tmp_path, bot)  # the bot's sweep passes e2e and reaches qa
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    number = issue_of(gh, run_id)["number"]
    assert f"except @{STARTER}, who started the run" in issue_of(gh, run_id)["body"]

    gh.comment(REPO, number, STARTER, "/approve")  # an admin, but the release is theirs
    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, bot)
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert "1 of 2 approvals (@maint)" in summary["runs"][0]["detail"]
    assert any("cannot approve it (`no_self_approval()`)" in s for s in said(gh, number))
    gh.comment(REPO, number, "carol", "/approve")
    code, summary = sweep(tmp_path, bot)
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert record_of(fs_store(tmp_path), run_id).status == "succeeded"


# -- a lost issue POST, and a copy of the issue --------------------------------------------


def test_after_a_lost_issue_post_a_copy_is_never_adopted_and_only_the_real_approve_counts(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    # GitHub makes the issue; its answer is lost (the client hears a 502 and, a POST, does not
    # send it again): the release suspends still looking for its issue.
    gh.inject("POST /repos/{owner}/{repo}/issues", status=502, after=True)
    run_id, markers, _ = _released_without_issue(tmp_path, gh)
    (real,) = [i for i in gh.issues(REPO) if f"run={run_id} " in (i["body"] or "")]
    assert real["user"] == BOT
    # Someone opens a newer issue with the same title and body.
    copy = gh.open_issue(REPO, real["title"], login="mallory", body=real["body"])

    code, summary = sweep(tmp_path, env_for(gh))  # finds the real one, zuke's own
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert record_of(fs_store(tmp_path), run_id).targets["qa"].meta["issue"] == real["number"]

    gh.comment(REPO, copy, "maint", "/approve")  # on the copy: never read
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert not promoted(markers)
    gh.comment(REPO, real["number"], "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    ((login, _, url),) = promoted(markers)[0]
    assert login == "maint" and f"/issues/{real['number']}#issuecomment-" in url
    assert said(gh, copy) == []  # zuke never wrote on the copy


def _released_without_issue(tmp_path: Path, gh: FakeGitHub) -> tuple[str, Path, None]:
    from tests.e2e.approval_support import BUILD

    write_build(tmp_path, BUILD)
    markers = tmp_path / "m"
    markers.mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(markers)], env_for(gh))
    assert record_of(fs_store(tmp_path), run_id).targets["qa"].meta["opening"] is True
    return run_id, markers, None


# -- a burst of comments ---------------------------------------------------------------------


@pytest.mark.parametrize("burst", [120, 1000])
def test_an_approve_after_a_burst_of_comments_is_read_by_the_next_sweep(
    tmp_path: Path, gh: FakeGitHub, burst: int
) -> None:
    run_id, markers, number = release(tmp_path, gh)
    gh.flood(REPO, number, login="mallory", count=burst)  # within one second of GitHub's clock
    for _ in range(2):  # two quiet sweeps after the burst
        code, summary = sweep(tmp_path, env_for(gh))
        assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert [row[0] for row in promoted(markers)[0]] == ["maint"]


def test_a_burst_and_an_approve_before_any_sweep_are_read_by_the_next_sweep(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.flood(REPO, number, login="mallory", count=1000)
    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary


# -- a /deny full of workflow commands, HTML and links ----------------------------------------

HOSTILE_DENY = (
    "/deny\n::add-mask::s3cret\n::stop-commands::x\n::error::boom\r::set-output name=a::b\n"
    "<script>alert(1)</script> <img src=x onerror=alert(1)>\n\n# a heading\n"
    "[release notes](https://evil.example/x) https://evil.example/bare @everyone #1\u2028done"
)


def test_a_deny_full_of_workflow_commands_html_and_links_renders_nothing_on_github(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, number = release(tmp_path, gh)
    gh.comment(REPO, number, "bob", HOSTILE_DENY)
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 1 and actions(summary, run_id) == ["gate-failed"], summary
    (closing,) = said(gh, number)
    assert closing.startswith("<!-- zuke-approval-closed") and "Denied by @bob" in closing
    for text in (closing, issue_of(gh, run_id)["body"]):
        outside = rendered_outside_code(text)
        for made in ("<script", "<img", "<a ", "<h1", "evil.example", "@everyone", "::"):
            assert made not in outside, (made, outside)
        assert not any(line.startswith("::") for line in text.splitlines())
        assert "\r" not in text and "\u2028" not in text


# -- a secret inside another parameter -------------------------------------------------------


class Recorder(LosingProxy):
    """In front of the fake GitHub: forwards everything, keeps every request body."""

    def __init__(self, upstream: FakeGitHub) -> None:
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()
        super().__init__(upstream, self._keep)

    def _keep(self, method: str, path: str, body: bytes) -> bool:
        with self._lock:
            self.bodies.append(body)
        return False  # never hold: every answer goes back


def test_a_secret_inside_another_parameter_reaches_no_request_body(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    proxy = Recorder(gh)
    try:
        env = {**env_for(gh), "GITHUB_API_URL": proxy.url}
        url = f"https://deploy:{SECRET}@deploy.example/app"
        from tests.e2e.approval_support import BUILD

        write_build(tmp_path, BUILD)
        markers = tmp_path / "m"
        markers.mkdir()
        run_id = suspend(tmp_path, ["promote", "--markers", str(markers), "--channel", url], env)
        number = issue_of(gh, run_id)["number"]
        gh.comment(REPO, number, "bob", f"/deny the url {url} leaks")
        code, _ = sweep(tmp_path, env)
        assert code == 1
        sent = b"\n".join(proxy.bodies).decode()
        assert sent and "[redacted]" in issue_of(gh, run_id)["body"]
        assert SECRET not in sent
        for encoded in (SECRET.replace("-", "%2D"), SECRET[:10]):
            assert encoded not in sent
    finally:
        proxy.close()


# -- a token GitHub refuses ------------------------------------------------------------------


def test_a_sweep_whose_token_github_refuses_exits_1_naming_the_token(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    run_id, _, _ = release(tmp_path, gh)
    store = fs_store(tmp_path)
    before = record_of(store, run_id)
    env = {**env_for(gh), "GH_TOKEN": "ghp_revoked0000000000000000000000000000"}
    code, out = finish(spawn(["resume", "--check"], tmp_path, env))
    assert code == 1, out
    zuke_lines = [line for line in out.splitlines() if line.startswith("zuke: ")]
    assert len(zuke_lines) == 1, out
    assert "GitHub answered 401" in zuke_lines[0] and "check GH_TOKEN" in zuke_lines[0]
    assert "ghp_revoked" not in out
    code, summary = sweep(tmp_path, env)
    assert code == 1 and summary["ok"] is False
    assert [(e["action"], e["result"]) for e in summary["runs"]] == [("failed", "suspended")]
    assert record_of(store, run_id) == before  # left as it was
    code, summary = sweep(tmp_path, env_for(gh))  # the token fixed: the sweep is green again
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
