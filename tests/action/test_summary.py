"""action/summary.py: the sweep step's outputs and job summary from zuke's JSON report."""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

import pytest

from tests.action.act_support import ROOT


def _summary_module() -> ModuleType:
    # as `python summary.py` runs it: its directory first on sys.path (for run_graph.py)
    if str(ROOT / "action") not in sys.path:
        sys.path.insert(0, str(ROOT / "action"))
    spec = importlib.util.spec_from_file_location(
        "zuke_action_summary", ROOT / "action" / "summary.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summary = _summary_module()


def _report(*runs: Mapping[str, object], failed: int = 0) -> dict[str, object]:
    return {
        "runs": list(runs),
        "counts": {"checked": len(runs), "resumed": 1, "still_waiting": 0, "failed": failed},
        "ok": failed == 0,
    }


RESUMED = {
    "id": "r-1",
    "build": "Release",
    "gate": "e2e",
    "action": "resumed",
    "result": "succeeded",
    "detail": None,
    "error": False,
}


@pytest.fixture
def github_files(tmp_path, monkeypatch):
    out, step = tmp_path / "output", tmp_path / "summary"
    monkeypatch.setenv("GITHUB_OUTPUT", str(out))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step))
    monkeypatch.setenv("ZUKE_STATE", "github://acme/app?branch=zuke-state")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    # the run graphs below the table read records with `zuke runs show`: none here
    # (test_summary_graph.py reads real ones)
    monkeypatch.setattr(summary, "read_record", lambda run_id, env: None)
    return out, step


def _main(tmp_path: Path, stdout: str, status: int) -> int:
    report = tmp_path / "report.txt"
    report.write_text(stdout)
    return int(summary.main([str(report), str(status)]))


def test_a_resumed_runs_own_output_ahead_of_the_report_is_skipped_and_not_echoed_again(
    tmp_path, github_files, capsys
):
    stdout = "deployed\n{ partial\n" + json.dumps(_report(RESUMED), indent=2) + "\n"
    assert _main(tmp_path, stdout, 0) == 0
    out, step = github_files
    assert out.read_text() == "checked=1\nresumed=1\nstill-waiting=0\nfailed=0\ndeferred=0\n"
    assert "deployed" not in capsys.readouterr().out  # the step's tee already logged it
    assert (
        "| `r-1` | Release | `e2e` | resumed | succeeded | "
        "[link](<https://github.com/acme/app/commits/zuke-state>) |" in step.read_text()
    )


def test_a_sweep_with_failures_writes_its_outputs_and_summary_and_then_fails(
    tmp_path, github_files
):
    failed = {
        **RESUMED,
        "action": "failed",
        "result": "failed",
        "detail": "x | y\nsee https://gh.example/run/7",
    }
    assert _main(tmp_path, json.dumps(_report(failed, failed=1)), 1) == 1
    out, step = github_files
    assert "failed=1\n" in out.read_text()
    row = next(line for line in step.read_text().splitlines() if "`r-1`" in line)
    assert "failed\\: x \\| y see https\\:\\/\\/gh\\.example\\/run\\/7" in row  # as text
    # never the first URL found in a reason: the link is one zuke built (the state branch's)
    assert row.endswith("[link](<https://github.com/acme/app/commits/zuke-state>) |")


def test_a_report_of_failures_fails_the_step_even_if_zuke_exited_zero(tmp_path, github_files):
    assert _main(tmp_path, json.dumps(_report(RESUMED, failed=1)), 0) == 1


def test_no_report_at_all_counts_as_a_failure_and_keeps_zukes_exit_code(tmp_path, github_files):
    assert _main(tmp_path, "zuke: No build file\n", 2) == 2
    out, step = github_files
    assert "\nfailed=1\n" in out.read_text()
    assert "exited 2 without a report" in step.read_text()


def test_a_sweep_with_nothing_to_check_says_so(tmp_path, github_files):
    empty = {"runs": [], "counts": {"checked": 0}, "ok": True}
    assert _main(tmp_path, json.dumps(empty), 0) == 0
    assert "No runs to check." in github_files[1].read_text()


def test_runs_deferred_for_the_next_sweep_are_an_output_and_do_not_fail_the_step(
    tmp_path, github_files
):
    deferred = {**RESUMED, "action": "deferred", "result": "suspended"}
    report = _report(deferred)
    report["counts"] = {**report["counts"], "resumed": 0, "deferred": 1}  # type: ignore[dict-item]
    assert _main(tmp_path, json.dumps(report), 0) == 0
    out, step = github_files
    assert out.read_text().endswith("failed=0\ndeferred=1\n")
    assert "1 checked, 0 resumed, 0 still-waiting, 0 failed, 1 deferred" in step.read_text()
    assert "| `r-1` | Release | `e2e` | deferred | suspended |" in step.read_text()


def test_without_the_branch_store_a_row_has_no_link(monkeypatch):
    monkeypatch.delenv("ZUKE_STATE", raising=False)
    text = summary.table(_report(RESUMED), 0, {})
    assert text.splitlines()[-1].endswith("| succeeded | — |")


def test_it_runs_as_a_script_under_the_interpreter_the_action_set_up(
    tmp_path, github_files, monkeypatch
):
    import subprocess

    monkeypatch.delenv("ZUKE_STATE")  # an empty local store: no network
    monkeypatch.setenv("ZUKE_STATE_DIR", str(tmp_path / "state"))
    report = tmp_path / "report.txt"
    report.write_text(json.dumps(_report(RESUMED)))
    done = subprocess.run(
        [sys.executable, str(ROOT / "action" / "summary.py"), str(report), "0"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,  # no build and no store here: r-1's record cannot be read
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "checked=1, resumed=1, still-waiting=0, failed=0, deferred=0"
    # the graphs are extra: a record that cannot be read is a line, not a failed step
    assert "#### Run `r-1`\n\nIts record could not be read." in github_files[1].read_text()
