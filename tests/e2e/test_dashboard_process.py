"""The release dashboard kept by real processes on the fake GitHub (issue 26 §3's acceptance):
a release waiting at an approval gate appears on it after ``python -m zuke_gh.dashboard``,
and drops off — listed as finished — once an approval and a sweep let it finish; a sweep
that changed nothing edits nothing; the secret parameter never shows."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import REPO, SECRET, env_for, fake_github, release
from tests.e2e.resume_support import sweep
from tests.e2e.support import DEADLINE_S, clean_env, finish, spawn
from zuke_gh._dashboard_view import marker

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        yield fake


def dashboard(tmp_path: Path, gh: FakeGitHub, **extra: str) -> tuple[int, str, str]:
    """``python -m zuke_gh.dashboard`` as the Action's step runs it after a sweep."""
    env = clean_env({**env_for(gh), "GITHUB_REPOSITORY": REPO, "GITHUB_RUN_ID": "4242",
                     "PYTHONPATH": str(ROOT), **extra})  # fmt: skip
    argv = [sys.executable, "-m", "zuke_gh.dashboard"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=DEADLINE_S, check=False)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def board(gh: FakeGitHub) -> dict[str, Any]:
    (found,) = [i for i in gh.issues(REPO) if marker(REPO) in (i["body"] or "")]
    return found


def edits(gh: FakeGitHub) -> int:
    return sum(1 for r in gh.requests if r["method"] == "PATCH")


def test_a_waiting_release_appears_then_drops_off_when_it_finishes(
    gh: FakeGitHub, tmp_path: Path
) -> None:
    run_id, _, number = release(tmp_path, gh)
    code, out, err = dashboard(tmp_path, gh)
    assert code == 0, err
    assert out.startswith("zuke: dashboard #") and ": created, 1 waiting, 2 writes; pinned" in out
    shown = board(gh)
    body = shown["body"]
    assert f"`{run_id}`" in body and "`qa`" in body and "`channel=beta`" in body
    assert f"/{REPO}/issues/{number}>)" in body  # the approval issue, linked
    assert "0 of 1 approvals" in body and "actions/runs/4242" in body
    assert SECRET not in body and gh.token not in body and shown["pinned"]
    assert shown["labels"] == ["zuke"]

    gh.reset_stats()
    code, out, err = dashboard(tmp_path, gh)  # nothing changed: no write
    assert code == 0 and ": unchanged, 1 waiting, 0 writes" in out, (out, err)
    assert edits(gh) == 0

    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and summary["counts"]["resumed"] == 1, summary
    gh.reset_stats()
    code, out, err = dashboard(tmp_path, gh)
    assert code == 0 and ": edited, 0 waiting, 1 writes" in out, (out, err)
    assert edits(gh) == 1
    body = board(gh)["body"]
    assert "Nothing is waiting." in body and f"| `{run_id}` |" in body and "succeeded" in body


def test_turned_off_it_reads_and_writes_nothing(gh: FakeGitHub, tmp_path: Path) -> None:
    release(tmp_path, gh)
    gh.reset_stats()
    code, out, _ = dashboard(tmp_path, gh, ZUKE_DASHBOARD="false")
    assert code == 0 and out == "zuke: dashboard: off (ZUKE_DASHBOARD)\n"
    assert gh.requests == [] and not any(marker(REPO) in (i["body"] or "") for i in
                                         gh.issues(REPO))  # fmt: skip


def test_zuke_github_dashboard_makes_every_sweep_keep_it_with_the_sweeps_store(
    gh: FakeGitHub, tmp_path: Path
) -> None:
    """API.md: ``ZUKE_GITHUB_DASHBOARD=OWNER/REPO`` makes every ``zuke resume --check`` keep
    that repository's dashboard (the ``zuke.after_sweep`` hook ``zuke_gh`` registers)."""
    run_id, _, number = release(tmp_path, gh)
    env = {**env_for(gh), "ZUKE_GITHUB_DASHBOARD": REPO}
    code, out = finish(spawn(["resume", "--check"], tmp_path, env))
    assert code == 0, out
    assert ": created, 1 waiting, 2 writes; pinned" in out
    assert f"`{run_id}`" in board(gh)["body"]

    gh.comment(REPO, number, "maint", "/approve")
    code, summary = sweep(tmp_path, env)  # --json: stdout stays one JSON document
    assert code == 0 and summary["counts"]["resumed"] == 1, summary
    body = board(gh)["body"]
    assert "Nothing is waiting." in body and f"| `{run_id}` |" in body


def test_a_sweep_without_the_setting_keeps_no_dashboard(gh: FakeGitHub, tmp_path: Path) -> None:
    release(tmp_path, gh)
    code, out = finish(spawn(["resume", "--check"], tmp_path, env_for(gh)))
    assert code == 0 and "dashboard" not in out, out
    assert not any(marker(REPO) in (i["body"] or "") for i in gh.issues(REPO))
