"""``zuke cancel`` of a run waiting on an e2e workflow, between real ``zuke`` processes and the
fake GitHub: the workflow run the gate dispatched is cancelled on GitHub and the run's events
say so; with ``.keep_remote_on_cancel()`` it is left running. The run was suspended, and the
cancel says "suspended" — not that its owner was gone."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.resume_support import fs_store, record_of, suspend
from tests.e2e.support import finish, spawn, write_build

pytestmark = pytest.mark.e2e

REPO = "acme/app"
CANCEL = "POST /repos/{owner}/{repo}/actions/runs/{run_id}/cancel"
BUILD = """
    from zuke import Build, parameter, target
    from zuke_gh import github_workflow

    class Release(Build):
        keep = parameter("leave the e2e run running on cancel").boolean().default(False)

        @target
        def deploy(self, t):
            return t.on_cancel(self.undeploy).executes(lambda: print("DEPLOY"))

        @target
        def e2e(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(github_workflow(self._workflow)).timeout("2h"))

        def _workflow(self, g):
            g.repo("acme/app").workflow("e2e.yml").ref("main")
            if self.keep.value:
                g.keep_remote_on_cancel()

        @target
        def ship(self, t):
            return t.depends_on(self.e2e).executes(lambda: print("SHIP"))

        @target
        def undeploy(self, t):
            return t.executes(lambda: print("UNDEPLOY"))
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO]) as fake:
        fake.add_workflow(REPO, "e2e.yml", inputs={"zuke_marker": {"required": False}},
                          run_name="${{ inputs.zuke_marker }}", jobs=["e2e"])  # fmt: skip
        yield fake


def env_for(gh: FakeGitHub) -> dict[str, str]:
    return {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token}


def cancels(gh: FakeGitHub) -> int:
    return int(gh.stats()["endpoints"].get(CANCEL, 0))


def test_cancel_cancels_the_dispatched_e2e_run_on_github(tmp_path: Path, gh: FakeGitHub) -> None:
    write_build(tmp_path, BUILD)
    run_id = suspend(tmp_path, ["ship"], env_for(gh))
    (dispatched,) = gh.dispatched(REPO)
    assert gh.run(dispatched["id"])["status"] != "completed"

    code, out = finish(spawn(["cancel", run_id, "--actor", "carol"], tmp_path, env_for(gh)))
    assert code == 0, out
    assert "it was suspended" in out and "owner was gone" not in out, out
    assert "asked GitHub to cancel workflow run" in out, out
    # GitHub: the dispatched run was cancelled, once
    assert cancels(gh) == 1
    after = gh.run(dispatched["id"])
    assert (after["status"], after["conclusion"]) == ("completed", "cancelled")
    # the run: cancelled, the gate told before the compensation, all of it in its events
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "cancelled"
    tools = [e.tool for e in record.events]
    assert tools.index("gate-cancel") < tools.index("compensate")
    [told] = [e for e in record.events if e.tool == "gate-cancel"]
    assert told.actor == "carol" and told.args == {"gate": "e2e"}
    assert f"/actions/runs/{dispatched['id']} (202)" in (told.detail or "")
    assert "UNDEPLOY" in out
    assert gh.token not in out and gh.token not in (told.detail or "")


def test_keep_remote_on_cancel_leaves_the_e2e_run_running(tmp_path: Path, gh: FakeGitHub) -> None:
    write_build(tmp_path, BUILD)
    run_id = suspend(tmp_path, ["ship", "--keep"], env_for(gh))
    (dispatched,) = gh.dispatched(REPO)

    code, out = finish(spawn(["cancel", run_id], tmp_path, env_for(gh)))
    assert code == 0, out
    assert cancels(gh) == 0
    assert gh.run(dispatched["id"])["status"] != "completed"
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "cancelled"
    [told] = [e for e in record.events if e.tool == "gate-cancel"]
    assert "left running (keep_remote_on_cancel())" in (told.detail or "")
