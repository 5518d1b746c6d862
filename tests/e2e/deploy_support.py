"""Shared by the ``github_deployments`` tests and the pictures of ``docs/github.md``
(``tests/fake_github/pictures``): the release build that deploys to staging, then waits at an
e2e signal and a two-approver ``github_approval`` gate before production; the fake GitHub with
its two approvers; and readers of what the fake shows for one run."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fixtures.fake_github import FakeGitHub

REPO = "acme/app"
#: the approvers of the two-approver gate (``write`` on REPO)
APPROVERS = ("alice", "bob")
BUILD = """
    from zuke import Build, external_signal, target
    from zuke_gh import github_approval, github_deployments

    class Release(Build):
        def reporters(self):
            return [github_deployments(lambda d: d.repo("acme/app"))]

        @target
        def staging(self, t):
            return t.environment("staging", url="https://staging.example.com").executes(
                lambda: print("deployed to staging"))

        @target
        def e2e(self, t):
            return t.depends_on(self.staging).waits_for(
                lambda s: s.on(external_signal("e2e-passed")).timeout("2h"))

        @target
        def approve(self, t):
            return t.depends_on(self.e2e).waits_for(lambda s: s.on(github_approval(
                lambda a: a.repo("acme/app").approvals(2))).timeout("72h"))

        @target
        def production(self, t):
            def body(ctx):
                ctx.environment_url = "https://app.example.com"
            return t.depends_on(self.approve).environment("production").executes(body)
"""


@contextmanager
def deploy_github(**kwargs: Any) -> Iterator[FakeGitHub]:
    """A fake GitHub with REPO and the two approvers (``kwargs``: ``FakeGitHub.start``'s)."""
    with FakeGitHub.start(repos=[REPO], **kwargs) as fake:
        for login in APPROVERS:
            fake.add_user(login)
            fake.set_permission(REPO, login, "write")
        yield fake


def env_for(gh: FakeGitHub) -> dict[str, str]:
    """A zuke process's GitHub settings: the fake's API, its token, the branch's head."""
    sha = gh.head(REPO, "main")
    assert sha is not None
    return {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token, "GITHUB_SHA": sha}


def shown(gh: FakeGitHub, run_id: str) -> dict[str, list[str]]:
    """This run's deployment per environment (never two) and its statuses, oldest first."""
    out: dict[str, list[str]] = {}
    for d in gh.deployments(REPO):
        if d["payload"].get("zuke", {}).get("run") != run_id:
            continue
        assert d["environment"] not in out, "two deployments of one run to one environment"
        out[d["environment"]] = [s["state"] for s in d["statuses"]]
    return out


def last(gh: FakeGitHub, run_id: str, environment: str) -> dict[str, Any]:
    """The latest status of this run's deployment to ``environment``."""
    mine = [d for d in gh.deployments(REPO) if d["payload"]["zuke"]["run"] == run_id]
    (d,) = [d for d in mine if d["environment"] == environment]
    status: dict[str, Any] = d["statuses"][-1]
    return status
