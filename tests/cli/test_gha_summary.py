"""The short job summary every zuke command writes under GitHub Actions (zuke/cli/gha.py):
what anyone wrote renders as text, secrets are redacted before they are escaped, and the
step's summary stays under GitHub's 1 MiB (a step may run several zuke commands)."""

from __future__ import annotations

import io
from pathlib import Path

from tests.cli.test_inert_rules import HOSTILE, render
from zuke._inert import SUMMARY_CAP_BYTES
from zuke._redact import Redactor
from zuke.cli import gha
from zuke.runs.sweep_report import SweepEntry, SweepReport

MIB = 1024 * 1024


def actions(tmp_path: Path) -> dict[str, str]:
    return {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"),
            "GITHUB_OUTPUT": str(tmp_path / "output")}  # fmt: skip


def test_a_sweep_of_many_runs_stops_adding_rows_below_the_cap(tmp_path: Path) -> None:
    env = actions(tmp_path)
    entries = [SweepEntry(f"run-{n:05d}-{'x' * 90}", "Release", "still-waiting", "suspended",
                          gate="qa") for n in range(12_000)]  # fmt: skip
    gha.publish(gha.sweep_report(SweepReport(entries), None), env, io.StringIO())
    text = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert len(text.encode()) <= SUMMARY_CAP_BYTES < MIB
    rows = [line for line in text.splitlines() if line.startswith("| `run-")]
    assert 0 < len(rows) < len(entries)
    assert all(line.endswith("| still-waiting | suspended |") for line in rows)
    assert text.endswith(f"\n\n{len(entries) - len(rows)} more: `zuke runs list`\n\n")
    gha.publish(gha.sweep_report(SweepReport(entries[:3]), None), env, io.StringIO())
    assert len(Path(env["GITHUB_STEP_SUMMARY"]).read_bytes()) <= SUMMARY_CAP_BYTES  # full: kept


def test_a_hostile_reason_in_a_sweep_row_renders_as_text(tmp_path: Path) -> None:
    env = actions(tmp_path)
    entry = SweepEntry("r-1", "Release", "failed", "denied: " + HOSTILE, gate="qa|x`y")
    gha.publish(gha.sweep_report(SweepReport([entry]), None), env, io.StringIO())
    page = render(Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8"))
    for made in ("<img", "<script", "<a ", "<em>", "<strong>"):
        assert made not in page, page
    row = page.split("<tbody>")[1].split("</tr>")[0]
    assert row.count("<td>") == 5  # the reason's "|" and the gate's broke no cell


def test_a_secret_is_redacted_before_it_is_escaped(tmp_path: Path) -> None:
    """Escaped first, ``a.b-c`` would be ``a\\.b\\-c`` and no redactor would find it."""
    env = actions(tmp_path)
    secret = "tok.en-<1234>*x"
    entry = SweepEntry("r-1", "Release", "failed", f"refused {secret}", gate="qa")
    redact = Redactor([secret]).text
    gha.publish(gha.sweep_report(SweepReport([entry]), None, redact), env, io.StringIO(), redact)
    text = Path(env["GITHUB_STEP_SUMMARY"]).read_text(encoding="utf-8")
    assert "refused \\[redacted\\]" in text
    for spelling in ("tok.en", "tok\\.en", "1234"):
        assert spelling not in text
