"""``python -m fixtures.fake_github`` as a real process, driven through its control endpoints."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from fixtures.fake_github import spawn_fake_github
from fixtures.fake_github.client import FakeControlError


def test_a_fake_in_another_process_is_driven_over_http(tmp_path: Path) -> None:
    with spawn_fake_github(token="tok-1", args=["--repo", "acme/app"]) as (gh, _):
        gh.add_workflow("acme/app", "e2e.yml", inputs={"zuke_marker": {}},
                        run_name="${{ inputs.zuke_marker }}", jobs=["e2e"])  # fmt: skip
        api = httpx.Client(base_url=gh.url, headers={"Authorization": "Bearer tok-1"})
        body = {"ref": "main", "inputs": {"zuke_marker": "m-9"}, "return_run_details": True}
        run_id = api.post("/repos/acme/app/actions/workflows/e2e.yml/dispatches", json=body).json()[
            "workflow_run_id"
        ]
        assert gh.dispatched("acme/app")[0]["display_title"] == "m-9"
        # the documented REST-style control endpoints, as a shell script would call them
        done = httpx.post(f"{gh.url}/_fake/runs/{run_id}/complete",
                          json={"conclusion": "failure", "jobs": [["e2e", "failure"]]})  # fmt: skip
        assert done.status_code == 200
        assert api.get(f"/repos/acme/app/actions/runs/{run_id}").json()["conclusion"] == "failure"
        stats = httpx.get(f"{gh.url}/_fake/stats").json()["result"]
        assert stats["requests"] == 2
        with pytest.raises(FakeControlError, match="no workflow run"):
            gh.complete_run(1)
        api.close()


def test_the_state_file_carries_the_state_across_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "fake.state"
    with spawn_fake_github(token="tok", args=["--state-file", str(state)]) as (gh, _):
        gh.add_workflow("acme/app", "e2e.yml")
        [run_id] = gh.add_run("acme/app", "e2e.yml", status="queued")
    assert state.exists()
    with spawn_fake_github(token="tok", args=["--state-file", str(state)]) as (gh, _):
        assert gh.run(run_id)["status"] == "queued"
        gh.complete_run(run_id)
        assert gh.run(run_id)["conclusion"] == "success"


def test_identities_adversaries_and_deployments_work_in_a_process_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    """The new control methods over HTTP (what the act scenarios and other processes use), and
    tokens, people, comments and deployments kept in the state file."""
    state = tmp_path / "fake.state"
    args = ["--repo", "acme/app", "--state-file", str(state)]
    with spawn_fake_github(token="tok", args=args) as (gh, _):
        gh.set_private("acme/app", False)
        mallory = gh.add_user_token("mallory")
        number = gh.open_issue("acme/app", "copy", login="mallory", body="<!-- marker -->")
        ids = gh.flood("acme/app", number, "mallory", 5)
        gh.delete_comment("acme/app", ids[0])
        gh.set_commit_status("acme/app", "main", "ci", "success")
        with httpx.Client(base_url=gh.url, headers={"Authorization": "Bearer tok"}) as api:
            made = api.post("/repos/acme/app/deployments", json={"ref": "main"})
            assert made.status_code == 201
        assert [d["environment"] for d in gh.deployments("acme/app")] == ["production"]
    with spawn_fake_github(token="tok", args=args) as (gh, _):
        assert len(gh.comments("acme/app", number)) == 4
        with httpx.Client(base_url=gh.url, headers={"Authorization": f"Bearer {mallory}"}) as m:
            assert m.get("/user").json()["login"] == "mallory"  # her token survived
        assert gh.deployments("acme/app")[0]["creator"] == "github-actions[bot]"
        # the request log survives too: the deployment (token-1), then mallory (the second token)
        assert gh.stats()["requests_by_token"] == {"token-1": 1, "token-2": 1}
