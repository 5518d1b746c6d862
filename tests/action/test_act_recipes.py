"""The copyable recipes under a real Actions runner (nektos/act): start a release and read its
run id from the job's outputs, list what waits (status), approve it, cancel another.

Each job installs zuke with the action's ``install-only`` mode (the sweep's pin) and runs
``python -m zuke`` itself; the outputs checked here are the ones zuke writes to
``$GITHUB_OUTPUT`` under Actions. The store is a filesystem one (``ZUKE_STATE_DIR``, which
wins over the examples' ``ZUKE_STATE``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.action.act_support import EXAMPLES, make_repo, requires_act, run_act, sweep_env, zuke

pytestmark = [pytest.mark.act, requires_act]

DEPLOY_TOKEN = "dt-0123456789-never-in-a-record"
BUILD = """
from zuke import Build, external_signal, parameter, target


class Release(Build):
    service = parameter("the service to release").required()
    deploy_token = parameter("the deploy credential").secret().required()

    @target
    def staging(self, t):
        return t.executes(lambda: print("staging", self.service.value,
                                        "token", len(self.deploy_token.value)))

    @target
    def approve(self, t):
        return t.depends_on(self.staging).waits_for(
            lambda s: s.on(external_signal("approved")).timeout("2h"))

    @target
    def release(self, t):
        return t.depends_on(self.approve).executes(self._release)

    def _release(self, ctx):
        approval = ctx.signals["approved"]
        print("released", self.service.value, "approved by", approval.data.get("by"),
              "token", len(self.deploy_token.value))
"""
RECIPES = ["release.yml", "status.yml", "approve.yml", "cancel.yml"]


def _record(repo: Path, state: Path, run_id: str) -> dict[str, object]:
    shown = zuke(repo, "runs", "show", run_id, "--json", env={"ZUKE_STATE_DIR": str(state)})
    found: dict[str, object] = json.loads(shown)
    return found


def test_release_status_approve_and_cancel_from_github(tmp_path: Path) -> None:
    state = tmp_path / "state"
    repo = make_repo(
        tmp_path / "repo", build_py=BUILD, workflows=[EXAMPLES / name for name in RECIPES]
    )
    env = sweep_env(state_dir=state)
    secrets = {"DEPLOY_TOKEN": DEPLOY_TOKEN}

    started = run_act(repo, "workflow_dispatch", "release.yml", env=env, secrets=secrets,
                      inputs={"service": "api"}, cache=tmp_path / "release")  # fmt: skip
    assert started.job_succeeded(), started.log
    outputs = started.outputs()
    run_id = outputs["run-id"]  # zuke wrote it to the step's outputs; the job exposes it
    assert (outputs["status"], outputs["gates"]) == ("suspended", "approve")
    assert f"run {run_id} is suspended, waiting at approve" in started.log
    assert f"staging api token {len(DEPLOY_TOKEN)}" in started.log  # the secret reached zuke

    status = run_act(repo, "workflow_dispatch", "status.yml", env=env,
                     cache=tmp_path / "status")  # fmt: skip
    assert status.job_succeeded(), status.log
    summary = status.summary()
    assert summary.startswith("### Waiting zuke runs")
    assert f"Run {run_id}" in summary and "signal:approved" in summary
    assert f"zuke resume {run_id} --signal approved" in summary

    approved = run_act(repo, "workflow_dispatch", "approve.yml", env=env, secrets=secrets,
                       inputs={"run-id": run_id, "signal": "approved", "data": '{"by": "qa"}'},
                       cache=tmp_path / "approve")  # fmt: skip
    assert approved.job_succeeded(), approved.log
    assert f"released api approved by qa token {len(DEPLOY_TOKEN)}" in approved.log
    assert (approved.outputs()["run-id"], approved.outputs()["status"]) == (run_id, "succeeded")
    assert _record(repo, state, run_id)["status"] == "succeeded"

    second = run_act(repo, "workflow_dispatch", "release.yml", env=env, secrets=secrets,
                     inputs={"service": "web"}, cache=tmp_path / "release2")  # fmt: skip
    assert second.job_succeeded(), second.log
    second_id = second.outputs()["run-id"]
    cancelled = run_act(repo, "workflow_dispatch", "cancel.yml", env=env, secrets=secrets,
                        inputs={"run-id": second_id}, cache=tmp_path / "cancel")  # fmt: skip
    assert cancelled.job_succeeded(), cancelled.log
    assert f"Run {second_id} cancelled" in cancelled.log
    assert _record(repo, state, second_id)["status"] == "cancelled"

    for result in (started, status, approved, second, cancelled):
        assert "ghs_act-test-token" not in result.log
    stored = b"".join(p.read_bytes() for p in state.rglob("*") if p.is_file())
    assert DEPLOY_TOKEN.encode() not in stored


def test_a_run_id_that_looks_like_an_option_is_refused_as_an_id_not_read_as_one(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", build_py=BUILD, workflows=[EXAMPLES / "approve.yml"])
    (tmp_path / "state").mkdir()  # a store in use: a missing one is refused before the id is
    result = run_act(repo, "workflow_dispatch", "approve.yml",
                     env=sweep_env(state_dir=tmp_path / "state"),
                     inputs={"run-id": "--force-graph", "signal": "approved"},
                     cache=tmp_path / "act")  # fmt: skip
    assert result.returncode != 0
    assert 'zuke: resume: no run "--force-graph" in the store' in result.log
