"""Issue 24 §10: the sweep step's summary stays under GitHub's 1 MiB (over it, GitHub drops
the step's whole summary); and its rows link only where zuke built the link.

50 graphs of a 60-target build passed 1 MiB: the summary now stops adding runs below the
cap and ends with ``N more: `zuke runs list```.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.action.test_summary import _main, summary

CAP = summary.inert.SUMMARY_CAP_BYTES
MIB = 1024 * 1024


def release_record(run_id: str, targets: int = 60) -> dict[str, Any]:
    """A run of a 60-target release: each target waits on the three before it."""
    names = [f"deploy-service-{i:02d}-to-eu-west-1-then-verify-health-and-notify" for i in
             range(targets)]  # fmt: skip
    graph = [{"name": n, "dependsOn": names[max(i - 3, 0) : i]} for i, n in enumerate(names)]
    status = {n: ("succeeded" if i < targets // 2 else "pending") for i, n in enumerate(names)}
    status[names[targets // 2]] = "waiting"
    return {
        "id": run_id,
        "build": "Release",
        "status": "suspended",
        "graph": graph,
        "targets": {n: {"status": s} for n, s in status.items()},
    }


def report_of(ids: list[str]) -> dict[str, Any]:
    runs = [{"id": i, "build": "Release", "gate": "qa", "action": "still-waiting",
             "result": "suspended", "detail": None, "error": False} for i in ids]  # fmt: skip
    return {"runs": runs, "counts": {"checked": len(ids), "still_waiting": len(ids)}, "ok": True}


@pytest.fixture
def step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GITHUB_OUTPUT", str(tmp_path / "output"))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary"))
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.delenv("ZUKE_STATE", raising=False)
    return tmp_path / "summary"


def test_fifty_graphs_of_a_sixty_target_build_stay_under_the_cap_and_say_how_many_more(
    tmp_path: Path, step: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"run-{n:02d}" for n in range(50)]
    monkeypatch.setenv("ZUKE_SUMMARY_GRAPHS", "50")
    monkeypatch.setattr(summary, "read_record", lambda run_id, env: release_record(run_id))
    uncapped = summary.table(report_of(ids), 0, {}) + summary.graphs(
        report_of(ids), release_record, 50
    )
    assert len(uncapped.encode()) > MIB  # what GitHub would have dropped whole
    assert _main(tmp_path, json.dumps(report_of(ids)), 0) == 0
    text = step.read_text(encoding="utf-8")
    assert len(text.encode()) <= CAP < MIB
    drawn = text.count("#### Run `run-")
    assert 0 < drawn < 50
    assert text.endswith(f"\n{50 - drawn} more: `zuke runs list`\n")
    assert all(f"| `{run_id}` |" in text for run_id in ids)  # every row: the graphs gave way
    assert text.count("```mermaid") == drawn == text.count("| Target | Status | Depends on |")


def test_a_sweep_of_many_runs_keeps_whole_rows_under_the_cap(
    tmp_path: Path, step: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = [f"run-{n:05d}-" + "x" * 100 for n in range(12_000)]
    monkeypatch.setenv("ZUKE_SUMMARY_GRAPHS", "0")
    assert _main(tmp_path, json.dumps(report_of(ids)), 0) == 0
    text = step.read_text(encoding="utf-8")
    assert len(text.encode()) <= CAP
    rows = [line for line in text.splitlines() if line.startswith("| `run-")]
    assert all(line.endswith(" | — |") for line in rows)  # no row cut in the middle
    assert text.endswith(f"\n\n{len(ids) - len(rows)} more: `zuke runs list`\n")


def test_a_summary_the_step_already_filled_gets_only_what_fits(
    tmp_path: Path, step: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    step.write_text("x" * (CAP - 600))
    monkeypatch.setenv("ZUKE_SUMMARY_GRAPHS", "0")
    assert _main(tmp_path, json.dumps(report_of([f"r{n}" for n in range(40)])), 0) == 0
    assert len(step.read_bytes()) <= CAP


# ---------------------------------------------------------------- links zuke built


def approval_record(run_id: str, decision: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"repo": "acme/app", "issue": 42, "issueUrl": "https://evil.example"}
    if decision is not None:
        meta["decision"] = decision
    return {"id": run_id, "build": "Release", "status": "failed", "graph": [{"name": "qa"}],
            "targets": {"qa": {"status": "failed", "meta": meta}}}  # fmt: skip


HOSTILE_DETAIL = (
    "denied by @mallory: [approve here](https://evil.example/x) <a href=https://evil.example>y</a>"
    "\n::add-mask::z ![i](https://evil.example/i.png)"
)


def test_a_row_links_to_the_gates_issue_and_deciding_comment_never_to_a_url_in_its_reason(
    tmp_path: Path, step: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    decision = {
        "approved": False,
        "deniedBy": {
            "login": "mallory",
            "url": "https://github.com/acme/app/issues/42#issuecomment-7",
        },
    }
    monkeypatch.setattr(summary, "read_record",
                        lambda run_id, env: approval_record(run_id, decision))  # fmt: skip
    row = {"id": "r-1", "build": "Release", "gate": "qa", "action": "failed",
           "result": "failed", "detail": HOSTILE_DETAIL, "error": False}  # fmt: skip
    report = {"runs": [row], "counts": {"checked": 1, "failed": 1}, "ok": False}
    assert _main(tmp_path, json.dumps(report), 1) == 1
    text = step.read_text(encoding="utf-8")
    line = next(line for line in text.splitlines() if line.startswith("| `r-1`"))
    assert line.endswith("| [link](<https://github.com/acme/app/issues/42#issuecomment-7>) |")
    assert "evil.example" not in line.replace("evil\\.example", "")  # only as escaped text
    assert "](" not in line.split(" | ")[4]  # the reason's cell: no link syntax left


@pytest.mark.parametrize(
    ("meta", "link"),
    [
        ({"repo": "acme/app", "issue": 7}, "https://github.com/acme/app/issues/7"),
        (
            {
                "repo": "acme/app",
                "issue": 7,
                "decision": {
                    "approvers": [{"url": "https://github.com/acme/app/issues/7#issuecomment-99"}]
                },
            },
            "https://github.com/acme/app/issues/7#issuecomment-99",
        ),
        (
            {
                "repo": "acme/app",
                "issue": 7,
                "decision": {
                    "deniedBy": {"url": "https://evil.example/acme/app/issues/7#issuecomment-99"}
                },
            },
            "https://github.com/acme/app/issues/7",
        ),  # a comment URL elsewhere: the issue only
        (
            {"runId": 123, "runUrl": "https://github.com/acme/app/actions/runs/123"},
            "https://github.com/acme/app/actions/runs/123",
        ),
        ({"runId": 123, "runUrl": "https://evil.example/acme/app/actions/runs/123"}, None),
        ({"runId": 124, "runUrl": "https://github.com/acme/app/actions/runs/123"}, None),
        ({"repo": "acme/app/../x", "issue": 7}, None),
        ({"repo": "acme/app", "issue": "7"}, None),
    ],
)
def test_a_gate_link_is_built_from_checked_parts_only(
    meta: dict[str, Any], link: str | None
) -> None:
    record = {"targets": {"qa": {"status": "waiting", "meta": meta}}}
    assert summary.gate_link(record, "qa", "https://github.com") == link
