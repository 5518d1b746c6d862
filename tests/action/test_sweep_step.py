"""The action's install and sweep steps, as bash runs them on a runner, with zuke replaced by a
recorder.

A ``python`` first on PATH records what ``python -m zuke`` was called with (its argv and the
store settings it saw) and prints a canned report; anything else goes to the real
interpreter (``summary.py``). So the step's own logic is what is under test: which store
it names, how the inputs become arguments, and that nothing in them is evaluated.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import queue
import subprocess
import sys
import threading
from importlib.metadata import version
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ruamel.yaml import YAML

from tests.action.act_support import ROOT

ACTION = YAML(typ="safe").load((ROOT / "action" / "action.yml").read_text())
[SWEEP] = [s for s in ACTION["runs"]["steps"] if s.get("id") == "sweep"]
[INSTALL] = [s for s in ACTION["runs"]["steps"] if s.get("name") == "Install zuke"]
[REQUIREMENTS] = [s for s in ACTION["runs"]["steps"] if "requirements" in s.get("name", "")]
[DASHBOARD] = [s for s in ACTION["runs"]["steps"] if s.get("id") == "dashboard"]
DEFAULT_TOKEN = "ghs_github_token"  # what ${{ github.token }} stands for here
REPORT = {"runs": [], "counts": {"checked": 0, "failed": 0}, "ok": True}

RECORDER = """#!{python}
import json, os, sys
if sys.argv[1:3] == ["-m", "pip"]:
    with open({log!r}, "a") as log:
        log.write(json.dumps({{"argv": sys.argv[3:], "cwd": os.getcwd()}}) + "\\n")
    sys.exit(0)
if sys.argv[1:3] in (["-m", "zuke"], ["-m", "zuke_gh.dashboard"]):
    names = ("ZUKE_STATE", "ZUKE_STATE_DIR", "GITHUB_TOKEN", "GH_TOKEN", "ZUKE_TOKEN_INPUT",
             "ZUKE_DASHBOARD", "ZUKE_DEFAULT_TOKEN")
    seen = {{k: os.environ.get(k) for k in names}}
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
    values = {**defaults, **inputs}
    step_env = {name: _value(expr, values) for name, expr in step["env"].items()}
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


def _value(expr: str, inputs: dict[str, str]) -> str:
    """A step's ``env:`` value as the runner would evaluate it (a comment's run id: the input
    ``comment-run-id`` here, which the approval_event step would have set)."""
    if expr.startswith("${{ inputs."):
        return inputs[expr.split("inputs.")[1].rstrip(" }")]
    if expr == "${{ steps.event.outputs.run-id }}":
        return inputs.get("comment-run-id", "")
    if expr == "${{ github.token }}":
        return DEFAULT_TOKEN
    assert "${{" not in expr, expr
    return expr


def test_the_state_branch_input_names_the_branch_store_of_this_repository(tmp_path):
    status, [call] = _step(tmp_path, {"state-branch": "release-state"})
    assert status == 0
    assert call["env"]["ZUKE_STATE"] == "github://acme/app?branch=release-state"
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


def _install_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zuke_action_install", ROOT / "action/install.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("inputs", "env", "spec"),
    [
        ({"zuke-version": "zuke==9.9"}, {"ZUKE_INSTALL_SPEC": "zuke==1.0"}, "zuke==9.9"),
        ({}, {"ZUKE_INSTALL_SPEC": "zuke==1.0"}, "zuke==1.0"),
        ({}, {}, str(ROOT)),
    ],
    ids=["the input", "the job's ZUKE_INSTALL_SPEC", "the action's own checkout"],
)
def test_zuke_is_installed_from_the_input_else_the_jobs_spec_else_the_actions_checkout(
    monkeypatch, inputs, env, spec
):
    assert INSTALL["env"] == {"ZUKE_SPEC": "${{ inputs.zuke-version }}"}
    assert INSTALL["run"] == 'python "$GITHUB_ACTION_PATH/install.py" install'
    install = _install_module()
    monkeypatch.delenv("ZUKE_INSTALL_SPEC", raising=False)
    values = {"ZUKE_SPEC": inputs.get("zuke-version", ""), **env}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    assert install.requested_spec() == spec


def test_a_spec_is_installed_without_its_dependencies_after_the_hashed_lock(monkeypatch):
    install = _install_module()
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(install, "installed", lambda lock: False)
    monkeypatch.setattr(
        install, "install_lock", lambda lock, *a, **k: calls.append(("lock", lock.name))
    )

    def pip(*args: str, **kw: object) -> bool:
        calls.append(args)
        return True

    monkeypatch.setattr(install, "_pip", pip)
    pinned = "git+https://github.com/zuke-build/zuke@" + "0" * 40
    install.install(pinned)
    assert calls[0] == ("lock", "requirements.lock")
    assert calls[1:] == [("install", "--no-compile", "--no-deps", pinned)]


def test_a_checkout_is_built_and_installed_with_the_lock_in_one_hash_checked_call(
    monkeypatch, tmp_path
):
    install = _install_module()
    wheel = tmp_path / "zuke-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"a wheel")
    seen: list[str] = []
    monkeypatch.setattr(install, "build_zuke", lambda checkout, into: wheel)
    monkeypatch.setattr(
        install, "install_lock", lambda lock, wheels, **kw: seen.append(lock.read_text())
    )
    install.install(str(ROOT))
    digest = hashlib.sha256(b"a wheel").hexdigest()
    assert seen == [f"-r {install.RUNTIME_LOCK}\n{wheel} --hash=sha256:{digest}\n"]


@pytest.mark.parametrize(
    ("token", "job", "chosen"),
    [
        ("ghs_input", {"GH_TOKEN": "ghs_job_gh", "GITHUB_TOKEN": "ghs_job"}, "ghs_input"),
        ("", {"GH_TOKEN": "ghs_job_gh", "GITHUB_TOKEN": "ghs_job"}, "ghs_job_gh"),
        ("", {"GITHUB_TOKEN": "ghs_job"}, "ghs_job"),
        ("", {}, DEFAULT_TOKEN),
    ],
    ids=[
        "an explicit token input beats the job's GH_TOKEN",
        "else the job's GH_TOKEN",
        "else the job's GITHUB_TOKEN",
        "else github.token",
    ],
)
def test_one_token_rule_and_zuke_sees_only_the_chosen_token(tmp_path, token, job, chosen):
    status, [call] = _step(tmp_path, {"token": token}, None, **job)
    assert status == 0
    # zuke reads GH_TOKEN first: both name the chosen token, so neither can override it
    assert (call["env"]["GH_TOKEN"], call["env"]["GITHUB_TOKEN"]) == (chosen, chosen)
    assert call["env"]["ZUKE_TOKEN_INPUT"] is None


def test_the_builds_requirements_file_and_packages_are_installed_in_the_working_directory(
    tmp_path,
):
    inputs = {
        "requirements": "ci/requirements.txt",
        "packages": "httpx>=0.27 my-deploy-lib==1.2 *",
        "working-directory": "app",
    }
    status, [call] = _step(tmp_path, inputs, REQUIREMENTS)
    assert status == 0
    assert call["argv"] == [
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--requirement",
        "ci/requirements.txt",
        "httpx>=0.27",
        "my-deploy-lib==1.2",
        "*",  # never globbed
    ]
    assert call["cwd"].endswith("/app")
    assert REQUIREMENTS["if"] == (
        "steps.event.outputs.sweep != 'false' && "
        "(inputs.requirements != '' || inputs.packages != '')"
    )


def test_a_pip_option_in_packages_is_refused_and_nothing_is_installed(tmp_path):
    status, calls = _step(tmp_path, {"packages": "ok==1 --index-url https://evil.example"},
                          REQUIREMENTS)  # fmt: skip
    assert status == 2
    assert calls == []


def test_install_only_skips_the_sweep_and_keeps_the_install_steps():
    assert SWEEP["if"] == "inputs.install-only != 'true' && steps.event.outputs.sweep != 'false'"
    assert INSTALL["if"] == "steps.event.outputs.sweep != 'false'"  # true unless a comment
    assert ACTION["inputs"]["install-only"]["default"] == "false"


def test_a_comment_is_read_first_and_only_a_comment_naming_no_run_skips_every_later_step():
    [event] = [s for s in ACTION["runs"]["steps"] if s.get("id") == "event"]
    assert ACTION["runs"]["steps"][0] is event
    assert event["if"] == "github.event_name == 'issue_comment' && inputs.install-only != 'true'"
    assert event["run"] == 'python3 "$GITHUB_ACTION_PATH/approval_event.py"'  # no setup-python
    assert "env" not in event  # the payload is read from its file, nothing through ${{ }}
    for step in ACTION["runs"]["steps"][1:]:
        assert "steps.event.outputs.sweep != 'false'" in step["if"], step["name"]


def test_a_comments_run_is_swept_alone_and_after_the_end_of_options(tmp_path):
    status, [call] = _step(tmp_path, {"comment-run-id": "-run.1", "args": "--actor bot"})
    assert status == 0
    assert call["argv"] == ["resume", "--check", "--json", "--actor", "bot", "--", "-run.1"]


MASKER = """#!{python}
import os, sys
if sys.argv[1:3] == ["-m", "zuke"]:
    print("::add-mask::ghs_minted-app-token", flush=True)
    with open({fifo!r}) as gate:  # blocks until the test has seen the line (or gave up)
        gate.read()
    print({report!r})
    sys.exit(0)
os.execv({python!r}, [{python!r}, *sys.argv[1:]])
"""


def test_a_mask_printed_by_zuke_reaches_the_runner_while_the_sweep_still_runs(tmp_path):
    """The runner learns a mask from the step's output as it comes; an App token's
    ``::add-mask::`` must reach it before the sweep ends, not in a captured copy after."""
    bin_dir, fifo = tmp_path / "bin", tmp_path / "gate"
    bin_dir.mkdir()
    os.mkfifo(fifo)
    masker = bin_dir / "python"
    masker.write_text(
        MASKER.format(python=sys.executable, fifo=str(fifo), report=json.dumps(REPORT))
    )
    masker.chmod(0o755)
    inputs = {k: str(v.get("default", "")) for k, v in ACTION["inputs"].items()}
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ZUKE_", "GITHUB_"))}
    env = {
        **base,
        **{name: _value(expr, inputs) for name, expr in SWEEP["env"].items()},
        "PATH": f"{bin_dir}{os.pathsep}{base['PATH']}",
        "GITHUB_ACTION_PATH": str(ROOT / "action"),
        "GITHUB_REPOSITORY": "acme/app",
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
    }
    step = subprocess.Popen(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", SWEEP["run"]],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    stdout = step.stdout
    assert stdout is not None
    lines: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        first = lines.get(timeout=30)  # a deadline, not a pause: the line comes at once or never
    except queue.Empty:
        first = None
    finally:
        with open(fifo, "w"):  # let the stand-in finish either way
            pass
    assert step.wait(timeout=30) == 0
    reader.join(timeout=30)
    stdout.close()
    assert first == "::add-mask::ghs_minted-app-token\n"


def test_a_spec_and_a_lock_already_installed_at_their_versions_call_no_pip(monkeypatch):
    """What pip would only confirm ("Requirement already satisfied"): the tests' environment,
    a self-hosted runner's Python."""
    install = _install_module()
    calls: list[tuple[str, ...]] = []

    def pip(*args: str, **kw: object) -> bool:
        calls.append(args)
        return True

    monkeypatch.setattr(install, "_pip", pip)
    monkeypatch.setattr(install, "installed", lambda lock: True)
    install.install(f"zuke=={version('zuke')}")
    assert calls == []
    install.install("zuke==0.0.0.dev0")  # not the version installed: pip installs it
    assert calls == [("install", "--no-compile", "--no-deps", "zuke==0.0.0.dev0")]
    assert not install.satisfied("no-such-package-zuke==1.0")
    assert not install.satisfied("zuke>=0.1")


# -- the dashboard step (issue 26 §3) ---------------------------------------------------------


@pytest.mark.parametrize(("inputs", "env", "store"), [
    ({}, {}, "github://acme/app?branch=zuke-state"),
    ({"state-branch": "release-state"}, {}, "github://acme/app?branch=release-state"),
    ({}, {"ZUKE_STATE": "memory://x"}, "memory://x"),
])  # fmt: skip
def test_the_dashboard_step_keeps_the_issue_with_the_sweeps_token_and_store(
    tmp_path, inputs, env, store
):
    status, [call] = _step(tmp_path, {"token": "ghp_chosen", **inputs}, DASHBOARD, **env)
    assert status == 0 and call["argv"] == []  # python -m zuke_gh.dashboard, no arguments
    seen = call["env"]
    assert seen["ZUKE_STATE"] == store
    assert seen["GH_TOKEN"] == seen["GITHUB_TOKEN"] == "ghp_chosen"
    assert seen["ZUKE_TOKEN_INPUT"] is None and seen["ZUKE_DEFAULT_TOKEN"] is None
    assert seen["ZUKE_DASHBOARD"] is None  # unless the job sets it: then the job's own


def test_a_jobs_zuke_dashboard_reaches_the_dashboard_step(tmp_path):
    _, [call] = _step(tmp_path, {}, DASHBOARD, ZUKE_DASHBOARD="false")
    assert call["env"]["ZUKE_DASHBOARD"] == "false"  # which python -m zuke_gh.dashboard obeys


def test_the_dashboard_step_runs_after_any_sweep_and_never_when_off_or_skipped():
    steps = ACTION["runs"]["steps"]
    assert steps.index(DASHBOARD) == steps.index(SWEEP) + 1
    condition = " ".join(DASHBOARD["if"].split())
    assert condition.startswith("!cancelled()")  # a failed sweep's runs are listed all the same
    for part in ("inputs.install-only != 'true'", "steps.event.outputs.sweep != 'false'",
                 "steps.sweep.outcome != 'skipped'", "inputs.dashboard != 'false'"):  # fmt: skip
        assert part in condition
    assert "ZUKE_DASHBOARD" not in DASHBOARD["env"]  # the job's own setting is not overridden
