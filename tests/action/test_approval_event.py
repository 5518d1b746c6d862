"""action/approval_event.py: which run a comment asks the sweep for, read from the issue's body
with the runner's own Python before anything is installed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.action.act_support import ROOT

SCRIPT = ROOT / "action" / "approval_event.py"
RUN = "0b7c2d4e-1f2a-4b3c-9d8e-7f6a5b4c3d2e"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("zuke_action_approval_event", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


approval_event = _module()


def _marker(run_id: str) -> str:
    return f"<!-- zuke-approval run={run_id} gate=qa commit={'c' * 40} -->"


def _event(
    issue_body: object, comment_body: str = "/approve", **issue: object
) -> dict[str, object]:
    return {
        "action": "created",
        "issue": {"number": 12, "body": issue_body, "state": "open", **issue},
        "comment": {"body": comment_body, "user": {"login": "someone"}},
    }


def _run(tmp_path: Path, event: object, name: str = "issue_comment") -> tuple[int, str, str]:
    """The script as the action runs it: its own process, an interpreter without site-packages
    (so nothing of zuke, nor anything installed, can be imported), the event in its file."""
    path, out = tmp_path / "event.json", tmp_path / "output"
    path.write_text(json.dumps(event))
    env = {"GITHUB_EVENT_NAME": name, "GITHUB_EVENT_PATH": str(path), "GITHUB_OUTPUT": str(out)}
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    written = out.read_text() if out.exists() else ""
    return done.returncode, written, done.stdout + done.stderr


def test_the_marker_in_the_issues_body_names_the_run_to_sweep(tmp_path):
    body = f"Release v1.2 waits for your approval.\n\n{_marker(RUN)}\n"
    code, written, said = _run(tmp_path, _event(body))
    assert code == 0
    assert written == f"sweep=true\nrun-id={RUN}\n"
    assert f"#12, the approval issue of run {RUN}: sweeping it" in said


def test_a_percent_quoted_run_id_is_read_as_the_gate_wrote_it():
    run_id, _ = approval_event.run_to_sweep(_event(_marker("run%2D1.a_b")))
    assert run_id == "run-1.a_b"


def test_a_marker_only_in_the_comment_is_never_read(tmp_path):
    code, written, said = _run(tmp_path, _event("A bug report.", f"/approve {_marker(RUN)}"))
    assert code == 0
    assert written == "sweep=false\nrun-id=\n"
    assert "issue #12 carries no zuke approval marker" in said
    assert RUN not in said


@pytest.mark.parametrize(
    "event",
    [
        _event(None),  # an issue without a body
        _event("no marker here"),
        _event("<!-- zuke-approval run= gate=qa commit=x -->"),  # not a whole marker
        {**_event(_marker(RUN)), "action": "edited"},
        {**_event(_marker(RUN)), "action": "deleted"},
        _event(_marker(RUN), pull_request={"url": "https://api.github.com/x/pulls/12"}),
        _event(_marker(RUN), state="closed"),
        {"action": "created"},
        ["not", "an", "object"],
    ],
    ids=[
        "no body",
        "no marker",
        "broken marker",
        "edited",
        "deleted",
        "a pull request",
        "a closed issue",
        "no issue",
        "not an object",
    ],
)
def test_anything_else_sweeps_nothing(tmp_path, event):
    code, written, _ = _run(tmp_path, event)
    assert (code, written) == (0, "sweep=false\nrun-id=\n")


@pytest.mark.parametrize(
    "hostile",
    [
        "$(touch%20pwned)",
        "a;id",
        "run%0A::set-output%20name=checked::9",  # a newline would forge an output
        "..",
        "%2E%2E",
        "a%2Fb",
        "x" * 129,
        "ok%E2%80%AEtxt",  # a bidi override
    ],
)
def test_a_hostile_run_id_is_refused_and_never_printed_or_written(tmp_path, hostile):
    code, written, said = _run(tmp_path, _event(f"forged {_marker(hostile)}"))
    assert code == 0
    assert written == "sweep=false\nrun-id=\n"
    assert "approval marker names no valid run id" in said
    assert "::" not in said and "pwned" not in said and "xxxx" not in said


def test_another_event_sweeps_every_run(tmp_path):
    code, written, _ = _run(tmp_path, {}, name="schedule")
    assert (code, written) == (0, "sweep=true\nrun-id=\n")


def test_an_unreadable_payload_is_one_zuke_line_and_a_failure(tmp_path):
    env = {"GITHUB_EVENT_NAME": "issue_comment", "GITHUB_EVENT_PATH": str(tmp_path / "none")}
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(SCRIPT)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == "zuke: cannot read the event payload (GITHUB_EVENT_PATH)\n"
