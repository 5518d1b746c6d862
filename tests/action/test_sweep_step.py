"""The action's install and sweep steps, as bash runs them on a runner, with zuke replaced by a
recorder.

A ``python`` first on PATH records what ``python -m zuke`` was called with (its argv and the
store settings it saw) and prints a canned report; anything else goes to the real
interpreter (``summary.py``). So the step's own logic is what is under test: which store
it names, how the inputs become arguments, and that nothing in them is evaluated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.action.act_support import ROOT

ACTION = YAML(typ="safe").load((ROOT / "action" / "action.yml").read_text())
[SWEEP] = [s for s in ACTION["runs"]["steps"] if s.get("id") == "sweep"]
[INSTALL] = [s for s in ACTION["runs"]["steps"] if s.get("name") == "Install zuke"]
REPORT = {"runs": [], "counts": {"checked": 0, "failed": 0}, "ok": True}

RECORDER = """#!{python}
import json, os, sys
if sys.argv[1:3] == ["-m", "pip"]:
    with open({log!r}, "a") as log:
        log.write(json.dumps({{"argv": sys.argv[3:]}}) + "\\n")
    sys.exit(0)
if sys.argv[1:3] == ["-m", "zuke"]:
    seen = {{k: os.environ.get(k) for k in ("ZUKE_STATE", "ZUKE_STATE_DIR", "GITHUB_TOKEN")}}
    with open({log!r}, "a") as log:
        log.write(json.dumps({{"argv": sys.argv[3:], "env": seen, "cwd": os.getcwd()}}) + "\\n")
    print({report!r})
    sys.exit(int(os.environ.get("RECORDER_EXIT", "0")))
os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""


def _step(
    tmp_path: Path, inputs: dict[str, str], step: dict[str, Any] | None = None, **env: str
) -> tuple[int, list[dict[str, Any]]]:
    """Run a step's script (the sweep's by default) with the inputs as its ``env:`` would
    pass them."""
    step = SWEEP if step is None else step
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.jsonl"
    bin_dir.mkdir(exist_ok=True)
    recorder = bin_dir / "python"
    recorder.write_text(
        RECORDER.format(python=sys.executable, log=str(log), report=json.dumps(REPORT))
    )
    recorder.chmod(0o755)
    defaults = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
    values = {**defaults, "token": "ghs_secret", **inputs}
    step_env = {
        name: values[expr.split("inputs.")[1].rstrip(" }")]
        for name, expr in step["env"].items()
        if expr.startswith("${{ inputs.")
    }
    workdir = tmp_path / "work" / values["working-directory"]
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "build.py").touch()  # something for a stray `*` to expand to
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ZUKE_", "GITHUB_"))}
    full = {
        **base,
        "PATH": f"{bin_dir}{os.pathsep}{base['PATH']}",
        "GITHUB_ACTION_PATH": str(ROOT / "action"),
        "GITHUB_REPOSITORY": "acme/app",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
        **step_env,
        **env,
    }
    # the runner's `shell: bash`: bash --noprofile --norc -eo pipefail {0}
    done = subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]],
        cwd=workdir,
        env=full,
        capture_output=True,
        text=True,
        check=False,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done.returncode, calls


def test_the_state_branch_input_names_the_branch_store_of_this_repository(tmp_path):
    status, [call] = _step(tmp_path, {"state-branch": "release-state"})
    assert status == 0
    assert call["env"]["ZUKE_STATE"] == "github://acme/app?branch=release-state"
    assert call["env"]["GITHUB_TOKEN"] == "ghs_secret"
    assert call["argv"] == ["resume", "--check", "--json"]


@pytest.mark.parametrize("setting", ["ZUKE_STATE", "ZUKE_STATE_DIR", "ZUKE_STATE_URL"])
def test_a_store_the_job_already_configured_is_used_as_it_is(tmp_path, setting):
    value = "memory://x" if setting == "ZUKE_STATE" else "/srv/state"
    _, [call] = _step(tmp_path, {}, None, **{setting: value})
    expected = value if setting == "ZUKE_STATE" else None
    assert call["env"]["ZUKE_STATE"] == expected


def test_an_empty_state_branch_leaves_the_store_to_zuke(tmp_path):
    _, [call] = _step(tmp_path, {"state-branch": ""})
    assert call["env"]["ZUKE_STATE"] is None


def test_build_file_args_and_working_directory_reach_zuke_and_nothing_in_them_is_evaluated(
    tmp_path,
):
    marker = tmp_path / "pwned"
    inputs = {
        "build-file": "ci/release build.py",
        "args": f"run-1 --actor $(touch {marker}) * ;id",
        "working-directory": "sub dir",
    }
    status, [call] = _step(tmp_path, inputs)
    assert status == 0
    assert call["argv"] == [
        "--file",
        "ci/release build.py",
        "resume",
        "--check",
        "--json",
        "run-1",
        "--actor",
        "$(touch",
        f"{marker})",
        "*",
        ";id",
    ]
    assert call["cwd"].endswith("sub dir")
    assert not marker.exists()


def test_a_failing_sweep_still_writes_the_outputs_and_then_fails_the_step(tmp_path):
    status, _ = _step(tmp_path, {}, RECORDER_EXIT="1")
    assert status == 1
    assert (tmp_path / "output").read_text().startswith("checked=0\n")
    assert "### zuke sweep" in (tmp_path / "summary").read_text()


@pytest.mark.parametrize(
    ("inputs", "env", "spec"),
    [
        ({"zuke-version": "zuke==9.9"}, {"ZUKE_INSTALL_SPEC": "zuke==1.0"}, "zuke==9.9"),
        ({}, {"ZUKE_INSTALL_SPEC": "zuke==1.0"}, "zuke==1.0"),
        ({}, {}, str(ROOT / "action") + "/.."),
    ],
    ids=["the input", "the job's ZUKE_INSTALL_SPEC", "the action's own checkout"],
)
def test_zuke_is_installed_from_the_input_else_the_jobs_spec_else_the_actions_checkout(
    tmp_path, inputs, env, spec
):
    status, [call] = _step(tmp_path, inputs, INSTALL, **env)
    assert status == 0
    assert call["argv"][-1] == spec and call["argv"][0] == "install"
