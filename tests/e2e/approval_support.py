"""Shared by the ``github_approval`` end-to-end tests: the release build, the people on the
fake GitHub, and a proxy that lets GitHub act on a call but loses its answer (a process killed
mid-call)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from fixtures.fake_github import FakeGitHub
from tests.e2e.resume_support import MARKER_WRITER, lines, suspend
from tests.e2e.support import write_build

REPO = "acme/app"
SHA = "5f3c0ffee5f3c0ffee5f3c0ffee5f3c0ffee5f3c"
SECRET = "s3cret-deploy-token-4711"
STARTER = "alice"
CLOSED = "<!-- zuke-approval-closed"
BUILD = (
    MARKER_WRITER
    + """
    import json, os, pathlib
    from zuke import Build, parameter, target
    from zuke_gh import github_approval, read_approval

    class Release(Build):
        markers = parameter("marker directory").required()
        token = parameter("deploy token").secret().required()
        channel = parameter("release channel").default("stable")
        needed = parameter("approvals needed").integer().default(1)
        window = parameter("the gate's timeout").default("1h")
        on_deny = parameter("what a /deny does: fail or rollback").default("fail")

        def _m(self):
            return pathlib.Path(self.markers.value)

        @target
        def staging(self, t):
            return t.executes(lambda: append_line(self._m() / "staging", str(os.getpid())))

        @target
        def qa(self, t):
            return t.depends_on(self.staging).waits_for(
                lambda s: s.on(github_approval(self._approval))
                .timeout(self.window.value)
                .on_timeout(self.rollback)
                .on_failure(self.rollback if self.on_deny.value == "rollback" else "fail")
            )

        def _approval(self, a):
            a.repo("acme/app").role("maintain").approvals(self.needed.value).no_self_approval()

        @target
        def promote(self, t):
            return t.depends_on(self.qa).executes(self._promote)

        def _promote(self, ctx):
            approval = read_approval(ctx.state_of("qa"))
            rows = [[a.login, a.role, a.url] for a in approval.approvers]
            append_line(self._m() / "promote", json.dumps([os.getpid(), rows]))

        @target
        def rollback(self, t):
            return t.executes(lambda: append_line(self._m() / "rollback", str(os.getpid())))
"""
)
#: login -> role on acme/app
PEOPLE = {STARTER: "admin", "maint": "maintain", "carol": "maintain", "bob": "maintain",
          "reader": "read", "writer": "write", "ownerish": "read"}  # fmt: skip


@contextmanager
def fake_github() -> Iterator[FakeGitHub]:
    """A fake GitHub with acme/app and its people (one per test module)."""
    with FakeGitHub.start(repos=[REPO]) as fake:
        for login, role in PEOPLE.items():
            fake.add_user(login)
            fake.set_permission(REPO, login, role)
        # author_association is a relationship, not a permission: make it lie (OWNER)
        fake.set_association(REPO, "ownerish", "OWNER")
        yield fake


def env_for(gh: FakeGitHub) -> dict[str, str]:
    """A secret is never recorded: each process has it from its environment (a CI secret)."""
    return {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token, "GITHUB_SHA": SHA,
            "ZUKE_ACTOR": STARTER, "TOKEN": SECRET}  # fmt: skip


def release(tmp_path: Path, gh: FakeGitHub, *args: str) -> tuple[str, Path, int]:
    """Start a release to its suspension at ``qa``: the run id, its markers, its issue."""
    write_build(tmp_path, BUILD)
    markers = tmp_path / "m"
    markers.mkdir()
    argv = ["promote", "--markers", str(markers), "--channel", "beta", *args]
    run_id = suspend(tmp_path, argv, env_for(gh))
    return run_id, markers, issue_of(gh, run_id)["number"]


def issue_of(gh: FakeGitHub, run_id: str) -> dict[str, Any]:
    (found,) = [i for i in gh.issues(REPO) if f"zuke-approval run={run_id} " in (i["body"] or "")]
    return found


def said(gh: FakeGitHub, number: int, login: str = "github-actions[bot]") -> list[str]:
    """The bodies of what ``login`` (by default the gate's token) wrote on the issue."""
    return [c["body"] for c in gh.comments(REPO, number) if c["user"] == login]


def requests_on(gh: FakeGitHub, number: int) -> list[dict[str, Any]]:
    mine = f"/repos/{REPO}/issues/{number}"
    return [r for r in gh.requests if r["path"] == mine or r["path"].startswith(mine + "/")]


def promoted(markers: Path) -> list[list[Any]]:
    """Each ``promote`` run: the approvers ``read_approval`` gave it (login, role, url)."""
    return [json.loads(line)[1] for line in lines(markers / "promote")]
