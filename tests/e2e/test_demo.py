"""The README's demo release, as a newcomer runs it: it suspends at QA, resumes, finishes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.e2e.support import finish, spawn

pytestmark = pytest.mark.e2e

DEMO = Path(__file__).resolve().parents[2] / "docs" / "demo"


def test_the_demo_release_suspends_at_qa_resumes_with_a_signal_and_finishes(tmp_path: Path) -> None:
    shutil.copy(DEMO / "build.py", tmp_path / "build.py")
    code, out = finish(spawn(["release", "--service", "api"], tmp_path))
    assert code == 0, out
    assert "qa_approval waits for signal:qa-approved" in out
    code, listed = finish(spawn(["runs", "list", "--status", "suspended", "--json"], tmp_path))
    assert code == 0, listed
    (run,) = json.loads(listed)
    assert f"zuke resume {run['id']} --signal qa-approved" in out
    resume = ["resume", run["id"], "--signal", "qa-approved", "--data", '{"by": "qa"}']
    code, out = finish(spawn(resume, tmp_path))
    assert code == 0, out
    assert "approved by qa" in out
    # production is a fan-out over the regions, each deployed under its own lock
    assert "release: fan-out over 2 item(s)." in out
    assert "deploying api:1.4.3 to production eu-west" in out
    assert "deploying api:1.4.3 to production us-east" in out
    assert "release: 2 item(s): 2 succeeded." in out
    code, shown = finish(spawn(["runs", "show", run["id"], "--json"], tmp_path))
    record = json.loads(shown)
    assert record["status"] == "succeeded"
    assert record["signals"]["qa-approved"]["data"] == {"by": "qa"}
    assert [e["tool"] for e in record["events"]] == ["signal", "resume"]
