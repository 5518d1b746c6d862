"""The example sweep on ``issue_comment``, under nektos/act: a comment on a zuke approval issue
sweeps that issue's run at once; any other comment costs nothing.

The run's id comes from the marker in the **issue's** body (zuke wrote it), never from the
comment. The gate here is a ``resume_when`` stand-in (a file's existence), so what is under
test is the routing (which run is swept, and that nothing is installed for other comments),
not the ``github_approval`` gate itself.
"""

from __future__ import annotations

import json

import pytest

from fixtures.fake_github import FakeGitHub
from tests.action.act_support import SLUG, make_repo, requires_act, run_act, sweep_env, zuke
from tests.gh.branch_support import BRANCH, Cost, add_main_branch, branch_store

pytestmark = [pytest.mark.act, requires_act]

BUILD = """
from pathlib import Path

from zuke import Build, parameter, resume_when, target


class Release(Build):
    approval = parameter("a file whose existence approves the release").required()

    @target
    def staging(self, t):
        return t.executes(lambda: print("staging", Path(self.approval.value).name))

    @target
    def qa(self, t):
        return t.depends_on(self.staging).waits_for(
            lambda s: s.on(resume_when(lambda: Path(self.approval.value).exists()))
        )

    @target
    def release(self, t):
        return t.depends_on(self.qa).executes(
            lambda: print("released", Path(self.approval.value).name)
        )
"""
#: what the action prints first in its install step (the setup-python stand-in)
INSTALLED = "setup-python stand-in"


def _marker(run_id: str) -> str:
    return f"<!-- zuke-approval run={run_id} gate=qa commit={'a' * 40} -->"


def _comment(issue_body: str, comment_body: str, **issue: object) -> dict[str, object]:
    """An ``issue_comment`` ``created`` payload (the fields the workflow and action read)."""
    return {
        "action": "created",
        "issue": {"number": 7, "title": "Approve", "body": issue_body, "state": "open", **issue},
        "comment": {"id": 70, "body": comment_body, "user": {"login": "maintainer"}},
        "repository": {"full_name": "acme/app", "default_branch": "main"},
        "sender": {"login": "maintainer"},
    }


@pytest.fixture
def two_ready_runs(tmp_path):
    """A repository with two suspended runs whose gates are both satisfied."""
    repo = make_repo(tmp_path / "repo", build_py=BUILD)
    state = tmp_path / "state"
    env = {"ZUKE_STATE_DIR": str(state)}
    ids: list[str] = []
    for name in ("first", "second"):
        approval = tmp_path / name
        zuke(repo, "release", "--approval", str(approval), env=env)
        approval.touch()
        [new] = _suspended(repo, env) - set(ids)
        ids.append(new)
    return repo, state, ids


def _suspended(repo, env):
    listed = zuke(repo, "runs", "list", "--status", "suspended", "--json", env=env)
    return {r["id"] for r in json.loads(listed)}


def test_a_comment_on_a_marked_issue_sweeps_exactly_the_run_its_marker_names(
    tmp_path, two_ready_runs
):
    repo, state, (first, second) = two_ready_runs
    # the comment names the other run: it is never read for that
    payload = _comment(f"Release waits for QA.\n\n{_marker(first)}", f"/approve {_marker(second)}")

    result = run_act(
        repo,
        "issue_comment",
        "sweep.yml",
        env=sweep_env(state_dir=state),
        payload=payload,
        cache=tmp_path / "act",
    )
    assert result.job_succeeded(), result.log
    assert result.outputs()["run-id"] == first
    assert result.sweep_outputs() == {
        "checked": "1",
        "resumed": "1",
        "still-waiting": "0",
        "failed": "0",
        "deferred": "0",
    }
    assert "released first" in result.log and "released second" not in result.log
    assert _suspended(repo, {"ZUKE_STATE_DIR": str(state)}) == {second}
    [row] = result.summary_rows()
    assert (row["Run"], row["Action"], row["Result"]) == (first, "resumed", "succeeded")
    # the run's graph, as mermaid and as a table, every target succeeded
    summary = result.summary()
    assert "```mermaid\nflowchart LR" in summary
    assert 't0["✔ staging"]:::succeeded' in summary and "t1 --> t2" in summary
    assert "| `release` | ✔ succeeded | `qa` |" in summary


@pytest.mark.parametrize(
    ("case", "issue_body", "issue"),
    [
        ("no marker", "Just a bug report.", {}),
        ("a pull request", _marker("RUN"), {"pull_request": {"url": "https://x.invalid/pr/7"}}),
        ("a closed issue", _marker("RUN"), {"state": "closed"}),
    ],
)
def test_a_comment_elsewhere_starts_no_job_at_all(
    tmp_path, two_ready_runs, case, issue_body, issue
):
    repo, state, (first, _) = two_ready_runs
    body = issue_body.replace("RUN", first)
    payload = _comment(body, f"/approve {_marker(first)}", **issue)

    result = run_act(
        repo,
        "issue_comment",
        "sweep.yml",
        env=sweep_env(state_dir=state),
        payload=payload,
        cache=tmp_path / "act",
    )
    assert result.returncode == 0, result.log
    assert INSTALLED not in result.log and "Sweep suspended runs" not in result.log, case
    assert result.sweep_outputs() == {}
    assert len(_suspended(repo, {"ZUKE_STATE_DIR": str(state)})) == 2


def test_a_marker_with_a_hostile_run_id_installs_nothing_and_sweeps_nothing(
    tmp_path, two_ready_runs
):
    repo, state, _ = two_ready_runs
    # it passes the job's coarse `contains` test; the action's own check refuses the id
    hostile = _marker("$(touch%20pwned)%0A::set-output%20name=checked::9")
    payload = _comment(f"A forged issue.\n{hostile}", "/approve")

    result = run_act(
        repo,
        "issue_comment",
        "sweep.yml",
        env=sweep_env(state_dir=state),
        payload=payload,
        cache=tmp_path / "act",
    )
    assert result.job_succeeded(), result.log
    assert "approval marker names no valid run id" in result.log
    assert INSTALLED not in result.log
    # no sweep: every count is empty, and nothing forged one
    assert set(result.sweep_outputs().values()) == {""}
    assert result.outputs()["run-id"] == ""
    assert not (repo / "pwned").exists()
    assert len(_suspended(repo, {"ZUKE_STATE_DIR": str(state)})) == 2


def test_on_the_branch_store_a_comment_sweep_of_a_waiting_run_costs_a_handful_of_reads(tmp_path):
    """The cost of a comment on a marked issue: one job that reads the one run (the sweep, then
    the summary's graph), and writes nothing while its gate still waits."""
    act_token = "ghs_act-test-token"  # what run_act passes as the GITHUB_TOKEN secret
    with FakeGitHub.start(tokens=[act_token], repos=[SLUG]) as gh:
        add_main_branch(gh)
        repo = make_repo(tmp_path / "repo", build_py=BUILD)
        cli = {"GITHUB_API_URL": gh.url, "GH_TOKEN": act_token,
               "ZUKE_STATE": f"github://{SLUG}?branch={BRANCH}"}  # fmt: skip
        zuke(repo, "release", "--approval", str(tmp_path / "not-yet"), env=cli)
        with branch_store(gh) as store:
            [run] = store.list_runs()
        cost = Cost(gh)

        result = run_act(
            repo,
            "issue_comment",
            "sweep.yml",
            env=sweep_env(api_url=gh.url),
            payload=_comment(_marker(run.id), "/approve"),
            cache=tmp_path / "act",
        )
        assert result.job_succeeded(), result.log
        assert result.sweep_outputs()["still-waiting"] == "1"
        assert 't1["⏸ qa"]:::waiting' in result.summary()  # the graph, read from the branch
        requests, _, commits = cost.take()
        assert commits == 0
        # measured: 6 for the sweep, 2 for the graph, 9 for the dashboard step that follows
        # (its first: who zuke writes as, looking for the issue, the waiting run's record,
        # opening and pinning the issue — writes, but no commit)
        assert requests <= 18, requests
