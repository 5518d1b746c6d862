"""A maintainer approves a release on GitHub, start to finish, under nektos/act (issue 17).

One fake GitHub holds everything: the state branch, the approval issue, its comments and who
has which role. Each step is a real Actions run of the example workflows:

1. ``release.yml`` (``workflow_dispatch``) starts a release; its ``qa`` gate is
   ``github_approval(lambda a: a.role("maintain"))`` (the repository from
   ``GITHUB_REPOSITORY``). The run suspends and the approval issue appears.
2. A read-only user comments ``/approve``: the ``issue_comment`` event (built from the fake's
   issue and comment, as GitHub sends it) sweeps that run; the user gets one reply and the
   release still waits.
3. A maintainer comments ``/approve``: the next ``issue_comment`` run sweeps the run at once,
   the release finishes, the issue gets its closing comment and is closed, and the job summary
   shows the run (table and mermaid graph).
4. A scheduled sweep afterwards checks nothing and commits nothing.

After each sweep the action's next step keeps the release dashboard issue (issue 26 §3): it
lists the waiting release, pinned and labelled, then drops it when the release finishes, and
the sweep that changed nothing leaves it as it is — all with the sweep job's permissions.
5. Neither the token nor the secret parameter's value is in any log, issue, comment or record.

Before each act run the job token gets exactly the permissions that workflow's job grants
(``set_token``), as GitHub's ``GITHUB_TOKEN`` does: a workflow that forgot ``issues: write``
fails here as it would on GitHub.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from fixtures.fake_github import FakeGitHub
from tests.action.act_support import (
    EXAMPLES,
    SLUG,
    ActResult,
    make_repo,
    requires_act,
    run_act,
    sweep_env,
)
from tests.gh.branch_support import BRANCH, add_main_branch, branch_store

pytestmark = [pytest.mark.act, requires_act]

ACT_TOKEN = "ghs_act-test-token"  # what run_act passes as the GITHUB_TOKEN secret
READER_TOKEN = "ghp_test-reads-the-fake"  # the test's own reads of the issue and comments
DEPLOY_TOKEN = "dpl-s3cret-4711-never-shown"
BOT = "github-actions[bot]"
CLOSED = "<!-- zuke-approval-closed"
BUILD = """
from zuke import Build, parameter, target
from zuke_gh import github_approval, read_approval


class Release(Build):
    service = parameter("the service to release").required()
    deploy_token = parameter("the production deploy token").secret().required()

    @target
    def staging(self, t):
        return t.executes(lambda: print("staging", self.service.value))

    @target
    def qa(self, t):
        return t.depends_on(self.staging).waits_for(
            lambda s: s.on(github_approval(lambda a: a.role("maintain"))).timeout("72h")
        )

    @target
    def release(self, t):
        return t.depends_on(self.qa).executes(self._release)

    def _release(self, ctx):
        approval = read_approval(ctx.state_of("qa"))
        assert approval is not None and approval.approved
        assert self.deploy_token.value  # the sweep has the secret from its environment
        by = ",".join(f"{a.login}/{a.role}" for a in approval.approvers)
        print("released", self.service.value, "approved by", by)
"""
#: the release job as action/README.md asks for an approval gate: the example plus issues: write
_ACTIONS_GRANT = "      actions: write # the gate dispatches e2e.yml\n"
_ISSUES_GRANT = "      issues: write # the approval gate opens its issue\n"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(tokens=[ACT_TOKEN, READER_TOKEN], repos=[SLUG]) as fake:
        add_main_branch(fake)
        for login, role in (("reader", "read"), ("maint", "maintain")):
            fake.add_user(login)
            fake.set_permission(SLUG, login, role)
        yield fake


def _release_workflow(root: Path) -> Path:
    text = (EXAMPLES / "release.yml").read_text()
    assert _ACTIONS_GRANT in text, "release.yml's permissions changed: update this test"
    path = root / "release.yml"
    path.write_text(text.replace(_ACTIONS_GRANT, _ACTIONS_GRANT + _ISSUES_GRANT))
    return path


def _grant(gh: FakeGitHub, workflow: Path) -> None:
    """The job token acts with the permissions the workflow's one job grants, nothing more."""
    [job] = YAML(typ="safe").load(workflow.read_text())["jobs"].values()
    gh.set_token(ACT_TOKEN, permissions=dict(job["permissions"]))


def _get(gh: FakeGitHub, path: str) -> Any:
    request = urllib.request.Request(
        gh.url + path,
        headers={
            "Authorization": f"Bearer {READER_TOKEN}",
            "Accept": "application/vnd.github+json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read())


def _comment_event(gh: FakeGitHub, number: int, login: str, body: str) -> dict[str, Any]:
    """``login`` comments ``body`` on issue ``number``; the ``issue_comment`` ``created``
    payload GitHub would deliver, its objects read back from the fake's REST API."""
    comment_id = gh.comment(SLUG, number, login, body)
    comment = _get(gh, f"/repos/{SLUG}/issues/comments/{comment_id}")
    return {
        "action": "created",
        "issue": _get(gh, f"/repos/{SLUG}/issues/{number}"),
        "comment": comment,
        "repository": _get(gh, f"/repos/{SLUG}"),
        "sender": comment["user"],
    }


def _said(gh: FakeGitHub, number: int, login: str) -> list[str]:
    return [c["body"] for c in gh.comments(SLUG, number) if c["user"] == login]


def _dashboard(gh: FakeGitHub) -> dict[str, Any]:
    [board] = [i for i in gh.issues(SLUG) if "<!-- zuke-dashboard repo=" in (i["body"] or "")]
    return board


def _status(gh: FakeGitHub, run_id: str) -> str:
    with branch_store(gh) as store:
        found = store.get_run(run_id)
        assert found is not None
        return found.record.status


def test_a_maintainer_approves_a_release_on_github_start_to_finish(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        build_py=BUILD,
        workflows=[_release_workflow(tmp_path), EXAMPLES / "sweep.yml"],
    )
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
    env = sweep_env(api_url=gh.url)
    secrets = {"DEPLOY_TOKEN": DEPLOY_TOKEN}
    logs: list[ActResult] = []

    def act(event: str, workflow: str, cache: str, **kw: Any) -> ActResult:
        _grant(gh, repo / ".github" / "workflows" / workflow)
        result = run_act(repo, event, workflow, env=env, secrets=secrets,
                         cache=tmp_path / cache, **kw)  # fmt: skip
        logs.append(result)
        assert result.job_succeeded(), result.log
        return result

    # 1. the release suspends at qa and its approval issue appears
    started = act("workflow_dispatch", "release.yml", "release", inputs={"service": "api"})
    assert "staging api" in started.log and "released" not in started.log
    run_id = started.outputs()["run-id"]
    assert (started.outputs()["status"], started.outputs()["gates"]) == ("suspended", "qa")
    assert _status(gh, run_id) == "suspended"
    [issue] = gh.issues(SLUG)
    number = issue["number"]
    assert issue["state"] == "open" and issue["user"] == BOT
    # bound to the run, the gate and the commit the release job checked out
    assert issue["body"].startswith(f"<!-- zuke-approval run={run_id} gate=qa commit={head} -->")
    assert "`service`: `api`" in issue["body"]
    assert "`maintain` role or higher on `acme/app`" in issue["body"]

    # 2. a read-only user's /approve: one polite reply, the release still waits
    refused = act("issue_comment", "sweep.yml", "reader",
                  payload=_comment_event(gh, number, "reader", "/approve LGTM"))  # fmt: skip
    assert refused.outputs()["run-id"] == run_id
    assert refused.sweep_outputs() == {"checked": "1", "resumed": "0", "still-waiting": "1",
                                       "failed": "0", "deferred": "0"}  # fmt: skip
    [reply] = _said(gh, number, BOT)
    assert reply.startswith("Thank you, @reader. Your `/approve` did not count")
    assert "released" not in refused.log
    assert _status(gh, run_id) == "suspended"
    assert gh.issues(SLUG)[0]["state"] == "open"
    # the sweep's next step kept the release dashboard, within the job's permissions
    board = _dashboard(gh)
    assert (board["user"], board["labels"], board["pinned"]) == (BOT, ["zuke"], True)
    assert f"| `{run_id}` | `Release` → `release` | `qa` |" in board["body"]
    assert f"/{SLUG}/issues/{number}>)" in board["body"]  # its approval issue, linked
    assert "zuke: dashboard #2: created, 1 waiting, 2 writes; pinned" in refused.log

    # 3. a maintainer's /approve: this very job finishes the release and closes the issue
    approved = act("issue_comment", "sweep.yml", "maint",
                   payload=_comment_event(gh, number, "maint", "/approve"))  # fmt: skip
    assert approved.outputs()["run-id"] == run_id
    assert "released api approved by maint/maintain" in approved.log
    assert approved.sweep_outputs() == {"checked": "1", "resumed": "1", "still-waiting": "0",
                                        "failed": "0", "deferred": "0"}  # fmt: skip
    assert _status(gh, run_id) == "succeeded"
    [closed] = [i for i in gh.issues(SLUG) if i["number"] == number]
    board = _dashboard(gh)  # the release dropped off: listed as finished, in one edit
    assert "Nothing is waiting." in board["body"] and f"| `{run_id}` |" in board["body"]
    assert "zuke: dashboard #2: edited, 0 waiting, 1 writes" in approved.log
    assert (closed["state"], closed["state_reason"], closed["closed_by"]) == (
        "closed", "completed", BOT
    )  # fmt: skip
    first_reply, closing = _said(gh, number, BOT)  # the reader was answered once, not again
    assert first_reply == reply
    assert closing.startswith(CLOSED) and "@maint (maintain)" in closing
    [row] = approved.summary_rows()
    assert (row["Run"], row["Gate"], row["Action"]) == (run_id, "qa", "resumed")
    assert row["Result"].startswith("succeeded")
    summary = approved.summary()
    assert "```mermaid\nflowchart LR" in summary
    assert 't1["✔ qa"]:::succeeded' in summary and "t1 --> t2" in summary
    assert "| `release` | ✔ succeeded | `qa` |" in summary

    # 4. the schedule's sweep afterwards: nothing to check, nothing written
    commits = gh.stats()["commits"]
    again = act("schedule", "sweep.yml", "again")
    assert again.sweep_outputs()["checked"] == "0" and again.sweep_outputs()["resumed"] == "0"
    assert "released" not in again.log
    assert gh.stats()["commits"] == commits
    assert "zuke: dashboard #2: unchanged, 0 waiting, 0 writes" in again.log  # no edit
    assert len(gh.comments(SLUG, number)) == 4  # two commands, one reply, the closing

    # 5. no token and no secret anywhere a person or a later process can read
    everything = [r.log for r in logs]
    everything += [f"{i['title']}\n{i['body']}" for i in gh.issues(SLUG)]
    everything += [c["body"] for c in gh.comments(SLUG, number)]
    everything += list(gh.files(SLUG, BRANCH).values())
    for text in everything:
        assert DEPLOY_TOKEN not in text and ACT_TOKEN not in text
