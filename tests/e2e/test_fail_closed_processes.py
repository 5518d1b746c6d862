"""Real processes: a holder whose renewals fail ends itself (exit 3) with its body's
children, and a run whose lease could not be renewed is left for the sweep to reap."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.resume_support import actions, fs_store, record_of, sweep, wait_for_lease_to_lapse
from tests.e2e.support import alive, finish, kill, spawn, wait_until, write_build

pytestmark = pytest.mark.e2e

FAULTY_BUILD = """
    import pathlib, subprocess, sys, time
    from zuke import Build, StoreUnavailableError, target
    from zuke.state.filesystem import FileSystemStateStore

    HERE = pathlib.Path(__file__).parent
    DOWN = HERE / "down"

    class CutOff(FileSystemStateStore):
        def renew_lock(self, key, token, ttl_ms):
            if DOWN.exists():
                raise StoreUnavailableError("state: the state service cannot be reached")
            return super().renew_lock(key, token, ttl_ms)

    class Faulty(Build):
        def state_store(self):
            return CutOff(HERE / ".zuke" / "runs")

        @target
        def locked(self, t):
            return t.lock(lambda s: s.key("fc-key").with_ttl("1s")).executes(self._spawning)

        def _spawning(self):  # starts two children (one ignores SIGTERM), then never returns
            polite = subprocess.Popen(["sleep", "60"])
            stubborn = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 60 & wait"])
            (HERE / "children").write_text(f"{polite.pid} {stubborn.pid}")
            DOWN.write_text("")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.01)

        @target
        def leased(self, t):
            return t.executes(self._leased)

        def _leased(self, ctx):
            (HERE / "leased").open("a").write(f"{ctx.run_id} redriven={ctx.redriven}\\n")
            if ctx.redriven:
                return  # the sweep's resume: done
            DOWN.write_text("")
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(0.01)
"""


def zuke_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("zuke: ")]


def test_a_sync_body_whose_lock_cannot_be_renewed_ends_its_process_and_children(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, FAULTY_BUILD)
    proc = spawn(["locked"], tmp_path)
    try:
        code, out = finish(proc)
    finally:
        kill(proc)
    assert code == 3, out
    (line,) = zuke_lines(out)
    assert line.startswith('zuke: lock "fc-key" could not be renewed (no renewal succeeded for ')
    assert "the state service cannot be reached" in line and "ends now (exit 3)" in line
    pids = [int(p) for p in (tmp_path / "children").read_text().split()]
    # SIGTERM, and SIGKILL for the one that ignores it.
    wait_until(lambda: not any(alive(pid) for pid in pids), "the children to be gone", timeout=10)


def test_a_run_whose_lease_cannot_be_renewed_is_left_for_the_sweep_to_reap(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, FAULTY_BUILD)
    proc = spawn(["leased"], tmp_path, {"ZUKE_RUN_LEASE_TTL": "1s"})
    try:
        code, out = finish(proc)
    finally:
        kill(proc)
    assert code == 3, out
    (line,) = zuke_lines(out)
    run_id = (tmp_path / "leased").read_text().split()[0]
    assert line.startswith(f"zuke: the lease of run {run_id} could not be renewed"), out
    assert "for a sweep (zuke resume --check) to reap" in line
    store = fs_store(tmp_path)
    assert record_of(store, run_id).status == "running"  # nothing written after the cut

    (tmp_path / "down").unlink()  # the store is back
    wait_for_lease_to_lapse(store, run_id)
    code, summary = sweep(tmp_path)
    assert code == 0, summary
    assert actions(summary, run_id)[:2] == ["reaped", "resumed"], summary
    assert record_of(store, run_id).status == "succeeded"
    assert (tmp_path / "leased").read_text().splitlines()[1] == f"{run_id} redriven=True"
