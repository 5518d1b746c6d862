"""Real processes: `zuke locks break` refuses a live holder unless --force; frees a dead one's."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.support import finish, kill, spawn, wait_until, write_build
from tests.e2e.test_lock_lifetime import OBSERVER, STUBBORN_BUILD, store_of
from zuke import LockAcquired
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunSummary

pytestmark = pytest.mark.e2e


def start_holder(
    tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[FileSystemStateStore, RunSummary, subprocess.Popen[str]]:
    write_build(tmp_path, STUBBORN_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    owner = spawn(["deploy", "--markers", str(markers)], tmp_path, env)
    wait_until(lambda: (markers / "started").exists(), "the body to start")
    store = store_of(tmp_path)
    (run,) = store.list_runs()
    return store, run, owner


def test_locks_break_refuses_a_live_holder_and_force_breaks_it(tmp_path: Path) -> None:
    store, run, owner = start_holder(tmp_path)
    try:
        code, out = finish(spawn(["locks", "break", "life-key", "--reason", "stuck"], tmp_path))
        assert code == 1, out
        assert "held by" in out and f"(run {run.id})" in out and "--force" in out, out
        assert "life-key" in [e.key for e in store.list_locks()]
        code, out = finish(
            spawn(["locks", "break", "life-key", "--reason", "stuck", "--force",
                   "--actor", "ops"], tmp_path)
        )  # fmt: skip
        assert code == 0, out
        assert 'Broke lock "life-key"' in out and f"Recorded in run {run.id}" in out, out
    finally:
        kill(owner)
    found = store.get_run(run.id)
    assert found is not None
    breaks = [e for e in found.record.events if e.tool == "locks-break"]
    assert [(e.actor, dict(e.args)) for e in breaks] == [
        ("ops", {"key": "life-key", "reason": "stuck"})
    ]


def test_locks_break_frees_a_killed_holders_lock_without_force(tmp_path: Path) -> None:
    store, run, owner = start_holder(tmp_path, {"ZUKE_RUN_LEASE_TTL": "1s"})
    fence = next(e.fence for e in store.list_locks() if e.key == "life-key")
    kill(owner)  # SIGKILL: no release, no record update

    def lapsed() -> bool:
        now = int(time.time() * 1000)
        return all(e.expires_at <= now for e in store.list_locks(run_id=run.id))

    wait_until(lapsed, "the killed holder's lease and lock to lapse")
    code, out = finish(spawn(["locks", "break", "life-key", "--reason", "killed"], tmp_path))
    assert code == 0, out
    assert 'Broke lock "life-key"' in out, out
    taken = store.acquire_lock("life-key", OBSERVER, 1_000)
    assert isinstance(taken, LockAcquired) and taken.fence > fence
