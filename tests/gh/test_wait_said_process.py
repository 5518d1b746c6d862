"""A user running ``zuke`` sees GitHub's rate-limit waits: real processes against the fake.

The fake answers the first dispatch (a gate's) or the first GraphQL call (the branch
store's) with a rate limit naming 3 s; the child waits it out for real and goes on, and
its output says so once, without the token.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.support import finish, spawn, write_build

pytestmark = pytest.mark.e2e

REPO = "acme/app"
GATED = """
    from zuke import Build, target
    from zuke_gh import github_workflow

    class Release(Build):
        @target
        def e2e(self, t):
            return t.waits_for(lambda s: s.on(github_workflow(
                lambda g: g.repo("acme/app").workflow("e2e.yml").ref("main"))).timeout("1h"))
"""
PLAIN = """
    from zuke import Build, target

    class Hello(Build):
        @target
        def hello(self, t):
            return t.executes(lambda: print("hello"))
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO]) as fake:
        fake.add_workflow(REPO, "e2e.yml", inputs={"zuke_marker": {"required": False}},
                          run_name="${{ inputs.zuke_marker }}")  # fmt: skip
        yield fake


def _said(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("zuke: GitHub rate limit:")]


def test_a_gates_rate_limited_first_dispatch_is_said(gh: FakeGitHub, tmp_path: Path) -> None:
    write_build(tmp_path, GATED)
    gh.inject("POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches",
              status=403, retry_after=3)  # GitHub's secondary limit  # fmt: skip
    env = {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token, "ZUKE_STATE_DIR": str(tmp_path / "s")}
    code, out = finish(spawn(["e2e"], tmp_path, env))
    assert code == 0, out
    [line] = _said(out)
    assert line.startswith("zuke: GitHub rate limit: waiting 3 s (until ") and line.endswith(
        " UTC)"
    )
    assert len(gh.dispatched(REPO)) == 1 and gh.token not in out


def test_the_branch_stores_rate_limited_graphql_call_is_said(
    gh: FakeGitHub, tmp_path: Path
) -> None:
    write_build(tmp_path, PLAIN)
    gh.inject("/graphql", status=200, retry_after=3)  # HTTP 200 + RATE_LIMITED, reset in 3 s
    env = {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token,
           "ZUKE_STATE": "github://acme/app?branch=zuke-state"}  # fmt: skip
    code, out = finish(spawn(["hello"], tmp_path, env))
    assert code == 0, out
    assert "hello" in out
    [line] = _said(out)
    assert line.startswith("zuke: GitHub rate limit: waiting 3 s (until ")
    assert gh.faults()[0]["hits"] == 1 and gh.token not in out
