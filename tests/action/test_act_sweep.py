"""The example sweep workflow and the action, run by nektos/act on the host, offline.

The store here is a filesystem one (``ZUKE_STATE_DIR``, which the action leaves as it is);
the branch store on the fake GitHub plugs into the same harness through
:func:`tests.action.act_support.sweep_env` (``api_url=``).
"""

from __future__ import annotations

import json

import pytest

from tests.action.act_support import EXAMPLES, make_repo, requires_act, run_act, sweep_env, zuke

pytestmark = [pytest.mark.act, requires_act]

BUILD = """
from pathlib import Path

from zuke import Build, parameter, resume_when, target


class Release(Build):
    approval = parameter("a file whose existence approves the release").required()
    broken = parameter("fail the deploy").boolean().default(False)

    @target
    def qa(self, t):
        return t.waits_for(lambda s: s.on(resume_when(lambda: Path(self.approval.value).exists())))

    @target
    def deploy(self, t):
        return t.depends_on(self.qa).executes(self._deploy)

    def _deploy(self) -> None:
        if self.broken.value:
            raise RuntimeError("the deploy broke")
        print("deployed", Path(self.approval.value).name)
"""


def _suspend(repo, state, approval, *extra):
    """Start a release in ``repo`` that suspends at its qa gate (as a release job would)."""
    env = {"ZUKE_STATE_DIR": str(state)}
    state.mkdir(exist_ok=True)  # a store in use (zuke runs list refuses a directory not there)
    before = _suspended(repo, env)
    zuke(repo, "deploy", "--approval", str(approval), *extra, env=env)
    [run_id] = _suspended(repo, env) - before
    return run_id


def _suspended(repo, env):
    listed = zuke(repo, "runs", "list", "--status", "suspended", "--json", env=env)
    return {r["id"] for r in json.loads(listed)}


def test_the_scheduled_sweep_resumes_the_satisfied_run_and_a_second_sweep_resumes_nothing(
    tmp_path,
):
    repo = make_repo(tmp_path / "repo", build_py=BUILD)
    state, ready, waiting = tmp_path / "state", tmp_path / "ready", tmp_path / "waiting"
    _suspend(repo, state, ready)
    _suspend(repo, state, waiting)
    ready.touch()
    env = sweep_env(state_dir=state)

    first = run_act(repo, "schedule", "sweep.yml", env=env, cache=tmp_path / "act1")
    assert first.job_succeeded(), first.log
    assert first.sweep_outputs() == {
        "checked": "2",
        "resumed": "1",
        "still-waiting": "1",
        "failed": "0",
        "deferred": "0",
    }
    assert "deployed ready" in first.log  # the resumed run's deploy ran inside the action
    rows = first.summary_rows()
    assert sorted(
        (r["Build"], r["Gate"], r["Action"], r["Result"].split(":")[0]) for r in rows
    ) == [
        ("Release", "qa", "resumed", "succeeded"),
        ("Release", "qa", "still-waiting", "suspended"),
    ]
    assert "2 checked, 1 resumed, 1 still-waiting, 0 failed" in first.summary()
    assert "checked=2 resumed=1 still-waiting=1" in first.log  # the outputs reached the next step
    assert "ghs_act-test-token" not in first.log  # the token (a secret) stays out of the log

    second = run_act(repo, "schedule", "sweep.yml", env=env, cache=tmp_path / "act2")
    assert second.job_succeeded(), second.log
    assert second.sweep_outputs() == {
        "checked": "1",
        "resumed": "0",
        "still-waiting": "1",
        "failed": "0",
        "deferred": "0",
    }
    assert [r["Action"] for r in second.summary_rows()] == ["still-waiting"]
    assert "deployed" not in second.log


def test_a_sweep_whose_resumed_run_fails_fails_the_job_after_writing_outputs_and_summary(tmp_path):
    repo = make_repo(tmp_path / "repo", build_py=BUILD)
    state, ready = tmp_path / "state", tmp_path / "ready"
    _suspend(repo, state, ready, "--broken")
    ready.touch()

    result = run_act(
        repo,
        "workflow_dispatch",
        "sweep.yml",
        env=sweep_env(state_dir=state),
        cache=tmp_path / "act",
    )
    assert result.returncode != 0 and "Job failed" in result.log, result.log
    assert result.sweep_outputs() == {
        "checked": "1",
        "resumed": "1",
        "still-waiting": "0",
        "failed": "1",
        "deferred": "0",
    }
    [row] = result.summary_rows()
    assert (row["Action"], row["Result"]) == ("resumed", "failed")
    assert "Main Report" not in result.log  # the step after the failed sweep did not run


@pytest.mark.parametrize(
    ("started_by", "sweeps"), [("workflow_dispatch", True), ("pull_request", False)]
)
def test_a_completed_e2e_run_starts_a_sweep_only_if_it_was_dispatched(tmp_path, started_by, sweeps):
    repo = make_repo(tmp_path / "repo", build_py=BUILD)
    payload = {"workflow_run": {"name": "e2e", "event": started_by, "conclusion": "success"}}

    result = run_act(
        repo,
        "workflow_run",
        "sweep.yml",
        env=sweep_env(state_dir=tmp_path / "state"),
        payload=payload,
        cache=tmp_path / "act",
    )
    assert result.returncode == 0, result.log
    if sweeps:
        assert result.job_succeeded(), result.log
        assert result.sweep_outputs()["checked"] == "0"
        assert "No runs to check." in result.summary()
    else:  # the job's if: is false, so act runs nothing at all
        assert "Sweep suspended runs" not in result.log
        assert result.sweep_outputs() == {}


RELEASE_BUILD = """
from pathlib import Path

from zuke import Build, parameter, resume_when, target

APPROVED = Path({approved!r})


class Release(Build):
    service = parameter("the service to release").required()

    @target
    def staging(self, t):
        return t.executes(lambda: print("staging", self.service.value))

    @target
    def qa(self, t):
        return t.depends_on(self.staging).waits_for(lambda s: s.on(resume_when(APPROVED.exists)))

    @target
    def release(self, t):
        return t.depends_on(self.qa).executes(lambda: print("released", self.service.value))
"""


def test_the_release_workflow_suspends_its_run_and_the_sweep_in_a_fresh_job_finishes_it(
    tmp_path,
):
    approved, state = tmp_path / "approved", tmp_path / "state"
    repo = make_repo(
        tmp_path / "repo",
        build_py=RELEASE_BUILD.format(approved=str(approved)),
        workflows=[EXAMPLES / "release.yml", EXAMPLES / "sweep.yml"],
    )
    env = sweep_env(state_dir=state)

    started = run_act(
        repo,
        "workflow_dispatch",
        "release.yml",
        env=env,
        inputs={"service": "api"},
        cache=tmp_path / "release",
    )
    assert started.job_succeeded(), started.log  # a suspended run is not a failed job
    assert "staging api" in started.log and "released" not in started.log
    [run_id] = _suspended(repo, {"ZUKE_STATE_DIR": str(state)})

    approved.touch()
    swept = run_act(repo, "schedule", "sweep.yml", env=env, cache=tmp_path / "sweep")
    assert swept.job_succeeded(), swept.log
    assert "released api" in swept.log
    assert swept.sweep_outputs()["resumed"] == "1"
    [row] = swept.summary_rows()
    assert (row["Run"], row["Gate"], row["Result"]) == (run_id, "qa", "succeeded")
