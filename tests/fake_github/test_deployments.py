"""The fake's deployments, deployment statuses and environments, as strict as GitHub's.

``auto_merge`` and ``required_contexts`` refuse a client that forgets to turn them off, a
status description past 140 characters is a 422, and ``auto_inactive`` retires only what
the OpenAPI description says it does. Bodies checked against GitHub's schemas.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from tests.fake_github.schema import conforms, conforms_list, v2022, v2026
from tests.fake_github.support import put_file

DEPLOYMENTS = "/repos/acme/app/deployments"


def _deploy(api: httpx.Client, **body: Any) -> dict[str, Any]:
    answer = api.post(DEPLOYMENTS, json={"ref": "main", **body})
    assert answer.status_code == 201, answer.text
    made: dict[str, Any] = answer.json()
    return made


def _status(api: httpx.Client, deployment: int, state: str, **body: Any) -> httpx.Response:
    return api.post(f"{DEPLOYMENTS}/{deployment}/statuses", json={"state": state, **body})


@pytest.mark.parametrize("models", [v2022, v2026])
def test_a_deployment_and_its_statuses_match_the_schemas(
    gh: FakeGitHub, api: httpx.Client, models: Any
) -> None:
    made = conforms(models.Deployment, _deploy(api, environment="staging", auto_merge=False,
                                               payload={"run": "r-1"}))  # fmt: skip
    assert (made.task, made.environment, made.production_environment) == ("deploy", "staging",
                                                                          False)  # fmt: skip
    assert made.creator is not None and made.creator.login == "github-actions[bot]"
    assert made.sha == gh.head("acme/app", "main")
    answer = _status(
        api,
        made.id,
        "in_progress",
        log_url="https://ci/1",
        environment_url="https://staging.example",
        description="rolling out",
    )
    assert answer.status_code == 201 and answer.headers["location"] == answer.json()["url"]
    status = conforms(models.DeploymentStatus, answer.json())
    assert (status.state, status.target_url, status.log_url) == ("in_progress", "https://ci/1",
                                                                  "https://ci/1")  # fmt: skip
    conforms_list(models.DeploymentStatus, api.get(f"{DEPLOYMENTS}/{made.id}/statuses").json())
    conforms(models.Deployment, api.get(f"{DEPLOYMENTS}/{made.id}").json())
    envs = conforms(models.ReposOwnerRepoEnvironmentsGetResponse200,
                    api.get("/repos/acme/app/environments").json())  # fmt: skip
    assert [e.name for e in envs.environments or []] == ["staging"]
    conforms(models.Environment, api.get("/repos/acme/app/environments/staging").json())


def test_defaults_production_and_the_identity_that_created_it(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    made = _deploy(api)
    assert (made["environment"], made["production_environment"], made["task"],
            made["payload"], made["transient_environment"]) == ("production", True, "deploy",
                                                                {}, False)  # fmt: skip
    gh.add_user("zuke-app[bot]", type="Bot")
    gh.set_token(gh.token, login="zuke-app[bot]")
    status = _status(api, made["id"], "success").json()
    assert status["creator"]["login"] == "zuke-app[bot]" and status["creator"]["type"] == "Bot"
    assert status["description"] == "" and status["environment"] == "production"


def test_auto_merge_is_on_by_default_and_merges_or_refuses_a_ref_behind_main(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    old = gh.head("acme/app", "main")
    assert old is not None
    api.post("/repos/acme/app/git/refs", json={"ref": "refs/heads/topic", "sha": old})
    assert put_file(api, "main.md", "new on main\n").status_code == 201  # main moves on
    merged = api.post(DEPLOYMENTS, json={"ref": "topic"})
    assert merged.status_code == 202  # a merge commit, and no deployment
    assert merged.json() == {"message": "Auto-merged main into topic on deployment."}
    conforms(v2022.ReposOwnerRepoDeploymentsPostResponse202, merged.json())
    assert gh.files("acme/app", "topic")["main.md"] == "new on main\n"
    assert gh.deployments("acme/app") == []
    conflict = put_file(api, "main.md", "main again\n", sha=api.get(
        "/repos/acme/app/contents/main.md").json()["sha"])  # fmt: skip
    assert conflict.status_code == 200
    topic_sha = api.get("/repos/acme/app/contents/main.md", params={"ref": "topic"}).json()["sha"]
    put_file(api, "main.md", "topic's own\n", sha=topic_sha, branch="topic")
    refused = api.post(DEPLOYMENTS, json={"ref": "topic"})
    assert refused.status_code == 409
    assert refused.json()["message"] == "Conflict merging main into topic."
    by_sha = api.post(DEPLOYMENTS, json={"ref": old})  # a run's commit: nothing to merge into
    assert by_sha.status_code == 409
    made = _deploy(api, ref=old, auto_merge=False)  # what a client must send
    assert made["sha"] == old and len(gh.deployments("acme/app")) == 1


def test_required_contexts_default_to_all_and_an_empty_list_skips_them(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    gh.set_commit_status("acme/app", "main", "ci/test", "success")
    gh.set_commit_status("acme/app", "main", "ci/lint", "pending")
    refused = api.post(DEPLOYMENTS, json={"ref": "main"})
    assert refused.status_code == 409
    assert refused.json()["message"] == "Conflict: Commit status checks failed for main."
    assert refused.json()["errors"][0]["contexts"] == [{"context": "ci/lint", "state": "pending"}]
    assert api.post(DEPLOYMENTS, json={"ref": "main", "required_contexts": ["ci/test",
                                       "security"]}).status_code == 409  # fmt: skip
    _deploy(api, required_contexts=["ci/test"])
    _deploy(api, required_contexts=[])
    gh.set_commit_status("acme/app", "main", "ci/lint", "success")  # the latest state counts
    _deploy(api)
    assert len(gh.deployments("acme/app")) == 3


def test_bad_bodies_are_refused_422(gh: FakeGitHub, api: httpx.Client) -> None:
    for body in (
        {},
        {"ref": "nope"},
        {"ref": "main", "auto_merge": "false"},
        {"ref": "main", "payload": 3},
        {"ref": "main", "required_contexts": "ci"},
    ):
        answer = api.post(DEPLOYMENTS, json=body)
        assert answer.status_code == 422, body
        conforms(v2022.ValidationError, answer.json())
    made = _deploy(api)
    long = _status(api, made["id"], "success", description="x" * 141)
    assert long.status_code == 422
    assert long.json()["errors"][0]["field"] == "description"
    assert _status(api, made["id"], "success", description="x" * 140).status_code == 201
    assert _status(api, made["id"], "done").status_code == 422
    assert _status(api, 999, "success").status_code == 404


def test_listing_filters_pages_and_newest_first(gh: FakeGitHub, api: httpx.Client) -> None:
    ids = [_deploy(api, environment=env, task=task)["id"]
           for env, task in (("staging", "deploy"), ("production", "deploy"),
                             ("staging", "deploy:migrations"))]  # fmt: skip
    assert [d["id"] for d in api.get(DEPLOYMENTS).json()] == ids[::-1]
    staging = api.get(DEPLOYMENTS, params={"environment": "staging"}).json()
    assert [d["id"] for d in staging] == [ids[2], ids[0]]
    assert [d["id"] for d in api.get(DEPLOYMENTS, params={"task": "deploy:migrations"}
                                     ).json()] == [ids[2]]  # fmt: skip
    assert api.get(DEPLOYMENTS, params={"ref": "other"}).json() == []
    sha = gh.head("acme/app", "main")
    assert len(api.get(DEPLOYMENTS, params={"sha": sha}).json()) == 3
    first = api.get(DEPLOYMENTS, params={"per_page": 2})
    assert len(first.json()) == 2 and 'rel="next"' in first.headers["link"]


def test_auto_inactive_retires_earlier_successful_non_production_deployments(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    first = _deploy(api, environment="staging")["id"]
    failed = _deploy(api, environment="staging")["id"]
    prod = _deploy(api, environment="production")["id"]
    kept = _deploy(api, environment="staging")["id"]
    for d, state in ((first, "success"), (failed, "failure"), (prod, "success"),
                     (kept, "success")):  # fmt: skip
        assert _status(api, d, state, auto_inactive=d != kept).status_code == 201
    newest = _deploy(api, environment="staging")["id"]
    _status(api, newest, "in_progress")
    states = {d["id"]: d["state"] for d in gh.deployments("acme/app")}
    assert states[first] == "success"  # not yet: only a success retires the earlier ones
    _status(api, newest, "success")
    states = {d["id"]: d["state"] for d in gh.deployments("acme/app")}
    assert states == {first: "inactive", failed: "failure", prod: "success",
                      kept: "inactive", newest: "success"}  # fmt: skip
    listed = api.get(f"{DEPLOYMENTS}/{first}/statuses").json()
    assert [s["state"] for s in listed] == ["inactive", "success"]  # newest first


def test_a_status_can_move_a_deployment_to_another_environment(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    made = _deploy(api, environment="staging")
    _status(api, made["id"], "queued", environment="production-eu-west")
    assert api.get(f"{DEPLOYMENTS}/{made['id']}").json()["environment"] == "production-eu-west"
    names = [e["name"] for e in api.get("/repos/acme/app/environments").json()["environments"]]
    assert names == ["production-eu-west", "staging"]


def test_only_an_inactive_deployment_is_deleted_unless_it_is_the_only_one(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    a, b = _deploy(api)["id"], _deploy(api)["id"]
    assert api.delete(f"{DEPLOYMENTS}/{a}").status_code == 422
    _status(api, a, "inactive")
    assert api.delete(f"{DEPLOYMENTS}/{a}").status_code == 204
    assert api.delete(f"{DEPLOYMENTS}/{b}").status_code == 204  # the only one left
    assert api.get(DEPLOYMENTS).json() == []


def test_deploying_needs_write_access_and_deployments_write(gh: FakeGitHub) -> None:
    gh.add_user("rita")
    gh.set_permission("acme/app", "rita", "read")
    with httpx.Client(
        base_url=gh.url,
        timeout=10,
        headers={"Authorization": f"Bearer {gh.add_user_token('rita')}"},
    ) as rita:
        assert rita.get(DEPLOYMENTS).status_code == 200  # fmt: skip
        refused = rita.post(DEPLOYMENTS, json={"ref": "main", "auto_merge": False})
        assert refused.status_code == 403
        assert refused.headers["x-accepted-github-permissions"] == "deployments=write"
