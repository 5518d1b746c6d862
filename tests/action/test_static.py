"""The action and its example workflows, checked by real tools and by reading their YAML.

SchemaStore's schemas (vendored in check-jsonschema) and zizmor's audit both run offline.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.action.act_support import EXAMPLES, ROOT, STANDINS, pinned_uses

ACTION = ROOT / "action" / "action.yml"
WORKFLOWS = sorted(EXAMPLES.glob("*.yml"))
ACTIONS = [
    ACTION,
    STANDINS / "setup-python" / "action.yml",
    STANDINS / "cache" / "restore" / "action.yml",
    STANDINS / "cache" / "save" / "action.yml",
]


def _tool(name: str) -> str:
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
    return found


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text())


def _run_blocks(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "run" and isinstance(value, str):
                yield value
            else:
                yield from _run_blocks(value)
    elif isinstance(node, list):
        for item in node:
            yield from _run_blocks(item)


def test_the_examples_are_the_workflows_the_readme_promises():
    assert [p.name for p in WORKFLOWS] == [
        "approve.yml",
        "cancel.yml",
        "e2e.yml",
        "release.yml",
        "status.yml",
        "sweep.yml",
    ]


@pytest.mark.parametrize("path", ACTIONS, ids=lambda p: p.parent.name)
def test_the_action_passes_schemastores_github_actions_schema(path):
    done = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-actions", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_each_example_workflow_passes_schemastores_github_workflows_schema(path):
    done = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_zizmor_finds_nothing_of_medium_or_higher_severity():
    # zizmor picks only action.yml out of a directory, so the workflows are named one by one
    files = [str(p) for p in [*ACTIONS, *WORKFLOWS]]
    done = subprocess.run(
        [_tool("zizmor"), "--offline", "--min-severity", "medium", "--no-progress", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "No findings to report" in done.stdout


@pytest.mark.parametrize("path", [*ACTIONS, *WORKFLOWS], ids=lambda p: p.name)
def test_no_run_script_interpolates_an_expression(path):
    blocks = list(_run_blocks(_load(path)))
    assert blocks, f"{path.name} has no run: step to check"
    assert [b for b in blocks if "${{" in b] == []


@pytest.mark.parametrize("path", [ACTION, *WORKFLOWS], ids=lambda p: p.name)
def test_every_uses_is_pinned_by_full_sha_with_a_version_comment(path):
    lines = [line for line in path.read_text().splitlines() if re.match(r"\s*-?\s*uses:", line)]
    assert lines
    assert len(pinned_uses(path)) == len(lines), lines
    for line in lines:
        assert re.search(r"@[0-9a-f]{40} # v\d", line), line


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_permissions_are_set_at_workflow_and_job_level_and_checkout_keeps_no_credentials(path):
    flow = _load(path)
    assert flow["permissions"] in ({}, {"contents": "read"})
    for job in flow["jobs"].values():
        granted = job["permissions"]
        assert set(granted) <= {"contents", "actions", "issues"}
        for step in job["steps"]:
            if str(step.get("uses", "")).startswith("actions/checkout@"):
                assert step["with"]["persist-credentials"] is False


def test_release_starts_queue_instead_of_a_third_cancelling_the_pending_second():
    # A concurrency group keeps one pending run by default: a third dispatch cancels the
    # second. `queue: max` keeps up to 100 pending; it does not combine with
    # cancel-in-progress (SchemaStore's workflow schema, `concurrency.queue`).
    flow = _load(EXAMPLES / "release.yml")
    assert flow["concurrency"] == {"group": "zuke-release", "queue": "max"}


def test_the_sweep_runs_on_a_schedule_on_dispatch_when_e2e_completes_and_on_a_new_comment():
    flow = _load(EXAMPLES / "sweep.yml")
    # every 15 minutes, never at :00 (the busiest minute, when schedules are delayed most)
    assert flow["on"]["schedule"] == [{"cron": "7-59/15 * * * *"}]
    assert "workflow_dispatch" in flow["on"]
    assert flow["on"]["workflow_run"] == {"workflows": ["e2e"], "types": ["completed"]}
    assert flow["on"]["issue_comment"] == {"types": ["created"]}
    job = flow["jobs"]["sweep"]
    # queued, never cancelled mid-resume; at job level, so that a comment which starts no job
    # never displaces a pending sweep
    assert "concurrency" not in flow
    assert job["concurrency"] == {
        "group": "zuke-sweep-${{ github.event.issue.number || 'all' }}",
        "cancel-in-progress": False,
    }
    assert job["permissions"] == {"contents": "write", "actions": "write", "issues": "write"}


def test_a_comment_starts_the_sweep_job_only_on_an_issue_whose_body_has_zukes_marker():
    condition = " ".join(_load(EXAMPLES / "sweep.yml")["jobs"]["sweep"]["if"].split())
    assert "(github.event_name != 'issue_comment' || (!github.event.issue.pull_request" in condition
    assert "contains(github.event.issue.body, '<!-- zuke-approval run=')" in condition
    assert "github.event.issue.state != 'closed'" in condition
    assert "comment" not in condition.replace("issue_comment", "")  # never the comment's text


def test_no_workflow_checks_out_a_ref_from_its_event():
    for path in WORKFLOWS:
        for job in _load(path)["jobs"].values():
            for step in job["steps"]:
                if str(step.get("uses", "")).startswith("actions/checkout@"):
                    assert set(step["with"]) == {"persist-credentials"}, path.name


def test_the_e2e_workflow_declares_the_marker_and_is_titled_by_it():
    flow = _load(EXAMPLES / "e2e.yml")
    assert flow["run-name"] == "${{ inputs.zuke_marker }}"
    assert flow["on"]["workflow_dispatch"]["inputs"]["zuke_marker"]["type"] == "string"


def test_the_action_has_the_inputs_and_outputs_of_its_contract():
    action = _load(ACTION)
    assert set(action["inputs"]) == {
        "build-file",
        "python-version",
        "zuke-version",
        "state-branch",
        "token",
        "args",
        "working-directory",
        "requirements",
        "packages",
        "install-only",
        "graphs",
        "dashboard",
    }
    # empty: an explicit token is told apart from the default (the token rule, README)
    assert action["inputs"]["token"]["default"] == ""
    assert action["inputs"]["zuke-version"]["default"] == ""
    assert action["inputs"]["graphs"]["default"] == "10"
    assert set(action["outputs"]) == {
        "checked",
        "resumed",
        "still-waiting",
        "failed",
        "deferred",
        "run-id",
    }
    steps = action["runs"]["steps"]
    assert steps[0]["id"] == "event"  # a comment is looked at before anything is installed
    assert steps[1]["uses"].startswith("actions/setup-python@")
    assert "resume --check --json" in steps[-2]["run"]
    assert steps[-1]["id"] == "dashboard"  # after the sweep (issue 26 §3)
    assert steps[-1]["run"].rstrip().endswith("python -m zuke_gh.dashboard")
    assert action["inputs"]["dashboard"]["default"] == "true"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_the_action_readme_shows_each_example_workflow_verbatim(path):
    readme = (ROOT / "action" / "README.md").read_text()
    assert f"```yaml\n{path.read_text()}```" in readme


def _zuke_action_steps(path: Path) -> list[dict[str, Any]]:
    flow = _load(path)
    return [
        step
        for job in flow["jobs"].values()
        for step in job["steps"]
        if str(step.get("uses", "")).startswith("zuke-build/zuke/action@")
    ]


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_example_installs_zuke_from_a_package_index(path):
    """zuke comes from the action's pinned commit (its own checkout), never from a name on an
    index that anyone could register (issue 16 item 10)."""
    text = path.read_text()
    assert not re.search(r"zuke\s*(==|>=|~=)", text), path.name
    assert "pip install" not in text
    for step in _zuke_action_steps(path):
        assert "zuke-version" not in step.get("with", {})


@pytest.mark.parametrize("name", ["release.yml", "approve.yml", "cancel.yml", "status.yml"])
def test_the_jobs_that_run_zuke_themselves_install_it_with_the_sweeps_pin(name):
    [step] = _zuke_action_steps(EXAMPLES / name)
    assert step["with"]["install-only"] == "true"
    [sweep] = _zuke_action_steps(EXAMPLES / "sweep.yml")
    assert step["uses"] == sweep["uses"]


@pytest.mark.parametrize("name", ["sweep.yml", "release.yml", "approve.yml", "cancel.yml"])
def test_the_jobs_that_run_a_release_install_its_requirements_in_its_environment(name):
    [step] = _zuke_action_steps(EXAMPLES / name)
    assert step["with"]["requirements"] == "requirements.txt"
    [job] = _load(EXAMPLES / name)["jobs"].values()
    assert job["environment"] == "production"


def test_the_release_job_exposes_the_run_id_that_zuke_writes_to_its_step_outputs():
    [job] = _load(EXAMPLES / "release.yml")["jobs"].values()
    assert job["outputs"]["run-id"] == "${{ steps.release.outputs.run-id }}"


def test_the_recipes_pass_their_inputs_through_env_and_never_read_a_run_id_as_an_option():
    approve = _load(EXAMPLES / "approve.yml")["jobs"]["approve"]["steps"][-1]
    assert approve["env"]["RUN_ID"] == "${{ inputs.run-id }}"
    assert approve["run"].endswith('-- "$RUN_ID"')
    cancel = _load(EXAMPLES / "cancel.yml")["jobs"]["cancel"]["steps"][-1]
    assert cancel["run"] == 'python -m zuke cancel -- "$RUN_ID"'
    status = _load(EXAMPLES / "status.yml")["jobs"]["status"]
    assert status["permissions"] == {"contents": "read"}


def test_zuke_and_its_dependencies_are_installed_by_hash_from_one_cached_wheelhouse():
    """issue 28 §4: the install goes through install.py (the hashed locks, zuke built with the
    locked backend); the wheelhouse is restored and saved under one key and one path, and
    saved only when the restore missed (a cache entry is immutable)."""
    steps = {step.get("name"): step for step in _load(ACTION)["runs"]["steps"]}
    assert steps["Install zuke"]["run"] == 'python "$GITHUB_ACTION_PATH/install.py" install'
    assert steps["Key the install cache"]["run"] == 'python "$GITHUB_ACTION_PATH/install.py" key'
    restore, save = steps["Restore the wheels"], steps["Save the wheels"]
    assert restore["uses"].startswith("actions/cache/restore@")
    assert save["uses"].startswith("actions/cache/save@")
    assert restore["uses"].split("@")[1] == save["uses"].split("@")[1]
    wheels = "${{ runner.temp }}/zuke-action-wheels"  # install.py's wheelhouse()
    assert restore["with"]["path"] == save["with"]["path"] == wheels
    assert restore["with"]["key"] == save["with"]["key"] == "${{ steps.install-key.outputs.key }}"
    assert "steps.wheels.outputs.cache-hit != 'true'" in save["if"]
    # only the build's own requirements are installed by a bare pip call
    pips = [name for name, step in steps.items() if "pip install" in step.get("run", "")]
    assert pips == ["Install the build's requirements"]
    install = (ROOT / "action" / "install.py").read_text()
    assert '"--require-hashes", "--no-deps", "--only-binary", ":all:"' in install
    # zuke is built by the locked backend's PEP 517 hook, never by a pip that could fetch one
    assert ".build_wheel(sys.argv[1])" in install and '"wheel"' not in install
