"""Every body the fake GitHub serves conforms to GitHub's published schema for it.

Real HTTP requests to the running fake; each body is validated strictly against
githubkit's models of GitHub's OpenAPI description (``schema.conforms``: required
fields enforced, no coercion, no key GitHub does not document).
"""

from __future__ import annotations

import base64
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from fixtures.fake_github import FakeGitHub
from tests.fake_github.schema import conforms, conforms_list, v2022, v2026
from tests.fake_github.support import dispatch, put_file

RUNS = "/repos/acme/app/actions/runs"
GIT = "/repos/acme/app/git"


def _seed(api: httpx.Client) -> tuple[str, str]:
    """A main branch with one file: (commit sha, blob sha)."""
    response = put_file(api, "seed.md", "hello\n", branch="main")  # main has a README
    assert response.status_code == 201
    return response.json()["commit"]["sha"], response.json()["content"]["sha"]


def _run_id(api: httpx.Client) -> int:
    response = dispatch(api, return_run_details=True)
    assert response.status_code == 200
    return int(response.json()["workflow_run_id"])


def test_the_checker_refuses_a_missing_required_field_and_an_undocumented_key() -> None:
    body: dict[str, Any] = {"ref": "refs/heads/main", "node_id": "n", "url": "u",
            "object": {"type": "commit", "sha": "a" * 40, "url": "u"}}  # fmt: skip
    conforms(v2022.GitRef, body)
    with pytest.raises(ValidationError):
        conforms(v2022.GitRef, {k: v for k, v in body.items() if k != "node_id"})
    with pytest.raises(ValidationError):
        conforms(v2022.GitRef, {**body, "node_id": 7})  # strict: no coercion
    with pytest.raises(AssertionError, match=r"\$\.object\.size"):
        conforms(v2022.GitRef, {**body, "object": {**body["object"], "size": 1}})


def test_dispatch_answers_match_the_schemas(gh: FakeGitHub, api: httpx.Client) -> None:
    details = dispatch(api, return_run_details=True)
    assert details.status_code == 200
    conforms(v2026.WorkflowDispatchResponse, details.json())
    plain = dispatch(api)
    assert plain.status_code == 204 and plain.content == b""
    refused = dispatch(api, undeclared="x")
    assert refused.status_code == 422
    conforms(v2022.ValidationError, refused.json())
    gh.configure(ghes=True)
    ghes = dispatch(api, return_run_details=True)
    assert ghes.status_code == 400
    conforms(v2022.BasicError, ghes.json())


@pytest.mark.parametrize("models", [v2022, v2026], ids=["2022-11-28", "2026-03-10"])
def test_workflow_and_run_listings_match_the_schemas(gh: FakeGitHub, api: httpx.Client, models):
    _seed(api)
    run_id = _run_id(api)
    gh.add_run("acme/app", "e2e.yml", branch="other", event="push", count=2)
    conforms(models.ReposOwnerRepoActionsWorkflowsGetResponse200,
             api.get("/repos/acme/app/actions/workflows").json())  # fmt: skip
    conforms(models.Workflow, api.get("/repos/acme/app/actions/workflows/e2e.yml").json())
    listing = api.get(RUNS).json()
    conforms(models.ReposOwnerRepoActionsRunsGetResponse200, listing)
    assert listing["total_count"] == 3
    per_workflow = api.get("/repos/acme/app/actions/workflows/e2e.yml/runs").json()
    conforms(models.ReposOwnerRepoActionsWorkflowsWorkflowIdRunsGetResponse200, per_workflow)
    run = conforms(models.WorkflowRun, api.get(f"{RUNS}/{run_id}").json())
    assert run.head_commit is not None  # main exists, so the run has its head commit


def test_a_run_in_every_state_matches_the_schema(gh: FakeGitHub, api: httpx.Client) -> None:
    run_id = _run_id(api)
    for status in ("queued", "in_progress", "waiting", "requested", "pending"):
        gh.set_run_status(run_id, status)
        assert conforms(v2022.WorkflowRun, api.get(f"{RUNS}/{run_id}").json()).status == status
        jobs = api.get(f"{RUNS}/{run_id}/jobs").json()
        conforms(v2022.ReposOwnerRepoActionsRunsRunIdJobsGetResponse200, jobs)
    gh.complete_run(run_id, conclusion="failure", jobs=[("unit", "success"), ("e2e", "failure")])
    run = conforms(v2022.WorkflowRun, api.get(f"{RUNS}/{run_id}").json())
    assert (run.status, run.conclusion) == ("completed", "failure")
    jobs = conforms(v2022.ReposOwnerRepoActionsRunsRunIdJobsGetResponse200,
                    api.get(f"{RUNS}/{run_id}/jobs").json())  # fmt: skip
    assert [(j.name, j.conclusion) for j in jobs.jobs] == [("unit", "success"), ("e2e", "failure")]


def test_cancel_answers_match_the_schemas(api: httpx.Client) -> None:
    run_id = _run_id(api)
    accepted = api.post(f"{RUNS}/{run_id}/cancel")
    assert accepted.status_code == 202
    conforms(v2022.EmptyObject, accepted.json())
    again = api.post(f"{RUNS}/{run_id}/cancel")
    assert again.status_code == 409
    conforms(v2022.BasicError, again.json())


def test_git_data_answers_match_the_schemas(api: httpx.Client) -> None:
    parent, _ = _seed(api)
    blob = api.post(f"{GIT}/blobs", json={"content": base64.b64encode(b"\x00\x01").decode(),
                                          "encoding": "base64"})  # fmt: skip
    assert blob.status_code == 201
    blob_sha = conforms(v2022.ShortBlob, blob.json()).sha
    conforms(v2022.Blob, api.get(f"{GIT}/blobs/{blob_sha}").json())
    base = api.get(f"{GIT}/commits/{parent}").json()["tree"]["sha"]
    entries = [
        {"path": "state/runs/r1.json", "mode": "100644", "type": "blob", "sha": blob_sha},
        {"path": "state/locks/l.json", "mode": "100644", "type": "blob", "content": "{}"},
    ]
    tree = api.post(f"{GIT}/trees", json={"base_tree": base, "tree": entries})
    assert tree.status_code == 201
    tree_sha = conforms(v2022.GitTree, tree.json()).sha
    conforms(v2022.GitTree, api.get(f"{GIT}/trees/{tree_sha}", params={"recursive": "1"}).json())
    commit = api.post(
        f"{GIT}/commits", json={"message": "m", "tree": tree_sha, "parents": [parent]}
    )
    assert commit.status_code == 201
    commit_sha = conforms(v2022.GitCommit, commit.json()).sha
    conforms(v2022.GitCommit, api.get(f"{GIT}/commits/{commit_sha}").json())
    created = api.post(f"{GIT}/refs", json={"ref": "refs/heads/zuke-state", "sha": parent})
    assert created.status_code == 201
    conforms(v2022.GitRef, created.json())
    conforms(v2022.GitRef, api.get(f"{GIT}/ref/heads/zuke-state").json())
    conforms_list(v2022.GitRef, api.get(f"{GIT}/matching-refs/heads/").json())
    moved = api.patch(f"{GIT}/refs/heads/zuke-state", json={"sha": commit_sha, "force": False})
    assert moved.status_code == 200
    conforms(v2022.GitRef, moved.json())
    refused = api.patch(f"{GIT}/refs/heads/zuke-state", json={"sha": parent, "force": False})
    assert refused.status_code == 422
    conforms(v2022.ValidationError, refused.json())
    assert api.delete(f"{GIT}/refs/heads/zuke-state").status_code == 204
    conforms(v2022.BasicError, api.get(f"{GIT}/ref/heads/zuke-state").json())


def test_contents_answers_match_the_schemas(api: httpx.Client) -> None:
    created = put_file(api, "state/a.json", "{}")
    assert created.status_code == 201
    sha = conforms(v2022.FileCommit, created.json()).content.sha
    conforms(v2022.GitCommit, created.json()["commit"])  # file-commit's commit is a git-commit
    conforms(v2022.ContentFile, api.get("/repos/acme/app/contents/state/a.json").json())
    conforms_list(v2022.ContentDirectoryItems, api.get("/repos/acme/app/contents/state").json())
    updated = put_file(api, "state/a.json", '{"v": 2}', sha=sha)
    assert updated.status_code == 200
    new_sha = conforms(v2022.FileCommit, updated.json()).content.sha
    conforms(v2022.ContentFile, updated.json()["content"] | {"content": "", "encoding": "base64"})
    stale = put_file(api, "state/a.json", "{}", sha=sha)
    assert stale.status_code == 409
    conforms(v2022.BasicError, stale.json())
    missing = put_file(api, "state/a.json", "{}")
    assert missing.status_code == 422
    conforms(v2022.ValidationError, missing.json())
    deleted = api.request("DELETE", "/repos/acme/app/contents/state/a.json",
                          json={"message": "rm", "sha": new_sha})  # fmt: skip
    assert deleted.status_code == 200
    assert conforms(v2022.FileCommit, deleted.json()).content is None


def test_errors_and_rate_limits_match_the_schemas(gh: FakeGitHub, api: httpx.Client) -> None:
    unauthorised = httpx.get(f"{gh.url}{RUNS}", headers={"Authorization": "Bearer wrong"})
    assert unauthorised.status_code == 401
    conforms(v2022.BasicError, unauthorised.json())
    assert api.get("/repos/acme/nope/actions/runs").status_code == 404
    conforms(v2022.BasicError, api.get("/repos/acme/nope/actions/runs").json())
    gh.inject(RUNS, status=403, retry_after=7)
    conforms(v2022.BasicError, api.get(RUNS).json())
    gh.configure(rate_limit=1)
    limited = api.get(RUNS)
    assert limited.status_code == 403
    conforms(v2022.BasicError, limited.json())
