"""A deleted state branch, between real ``zuke`` processes and the fake GitHub (issue 16, item 11).

While one run holds ``deploy-api`` and another waits suspended, the branch is
deleted (as someone would in GitHub's UI). Every later process refuses with one
line naming what happened and what to do — a second run wanting the same lock,
the sweep, a listing — and nothing is re-created over the lost state, so no
second holder gets ``deploy-api`` with a fence that went back, and the
suspended run does not vanish into "no run in the store". ``zuke state init
--force`` starts afresh on purpose, and fences keep rising.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.resume_support import suspend
from tests.e2e.support import finish, spawn, wait_until, write_build
from tests.gh.branch_support import BRANCH, REPO, UNLIMITED

pytestmark = pytest.mark.e2e

BUILD = """
    import pathlib, time
    from zuke import Build, external_signal, parameter, target


    class Release(Build):
        markers = parameter("marker directory").default(".")

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("deploy-api").with_ttl("10m")).executes(self._hold)

        def _hold(self, ctx):
            markers = pathlib.Path(self.markers.value)
            (markers / f"fence-{ctx.lock.fence}").write_text("")
            deadline = time.monotonic() + 60
            while not (markers / "release").exists() and time.monotonic() < deadline:
                time.sleep(0.01)

        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(external_signal("approved")).timeout("1h"))
"""
DELETED = "the state branch was deleted"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO], **UNLIMITED) as fake:
        yield fake


def test_a_deleted_branch_is_refused_by_every_later_process_and_fences_never_go_back(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    env = {"ZUKE_STATE": f"github://{REPO}?branch={BRANCH}", "GITHUB_API_URL": gh.url,
           "GITHUB_TOKEN": gh.token}  # fmt: skip
    write_build(tmp_path, BUILD)
    waiting = suspend(tmp_path, ["approve"], env)
    holder = spawn(["deploy", "--markers", str(tmp_path)], tmp_path, env)
    wait_until(lambda: any(tmp_path.glob("fence-*")), "the first run to hold deploy-api")
    [first] = tmp_path.glob("fence-*")

    assert gh.delete_branch(REPO, BRANCH)  # someone deletes it in GitHub's UI

    second = spawn(["deploy", "--markers", str(tmp_path)], tmp_path, env)
    code, out = finish(second)
    assert code != 0 and DELETED in out, out
    assert list(tmp_path.glob("fence-*")) == [first], "a second holder took deploy-api"
    for args in (["resume", "--check"], ["runs", "list"], ["resume", waiting, "--signal",
                                                            "approved"]):  # fmt: skip
        code, out = finish(spawn(args, tmp_path, env))
        assert code != 0, (args, out)
        [line] = [x for x in out.splitlines() if x.startswith("zuke: ")]
        assert DELETED in line and "zuke state init --force" in line, out
        assert "no run" not in out, out  # the waiting run is not silently "gone"
    assert gh.head(REPO, BRANCH) is None  # nobody re-created it over the lost state

    (tmp_path / "release").write_text("")
    code, out = finish(holder)
    assert code != 0 and DELETED in out, out  # the holder cannot record its end: it says why

    code, out = finish(spawn(["state", "init", "--force"], tmp_path, env))
    assert code == 0 and "created afresh" in out, out
    third = spawn(["deploy", "--markers", str(tmp_path)], tmp_path, env)
    (tmp_path / "release").write_text("")
    code, out = finish(third)
    assert code == 0, out
    fences = sorted(int(p.name.split("-")[1]) for p in tmp_path.glob("fence-*"))
    assert len(fences) == 2 and fences[1] > 1_000_000_000_000 > fences[0], fences


def test_state_init_makes_the_branch_once_and_a_store_that_needs_none_says_so(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    env = {"ZUKE_STATE": f"github://{REPO}?branch={BRANCH}", "GITHUB_API_URL": gh.url,
           "GITHUB_TOKEN": gh.token}  # fmt: skip
    code, out = finish(spawn(["state", "init"], tmp_path, env))
    assert code == 0 and out.strip() == f"state: github://{REPO}?branch={BRANCH} created", out
    assert sorted(gh.files(REPO, BRANCH)) == ["README.md", "active.json"]
    assert f"refs/tags/zuke-state/{BRANCH}" in gh.refs(REPO)
    code, out = finish(spawn(["state", "init"], tmp_path, env))
    assert code == 0 and out.strip().endswith("exists"), out
    assert len(gh.log(REPO, BRANCH)) == 1
    code, out = finish(spawn(["state", "init"], tmp_path, {}))  # the filesystem store
    assert code == 0 and "needs no init" in out, out
