"""Real processes: a lock lives exactly as long as its body, and `zuke cancel` respects that."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build
from zuke import LockAcquired, LockHeld, LockHolder
from zuke.state.filesystem import FileSystemStateStore

pytestmark = pytest.mark.e2e

OBSERVER = LockHolder(actor="test", run_id="observer", since="2026-01-01T00:00:00.000Z")

# A body that ignores ctx.cancelled (as most real work does) until the test says so.
STUBBORN_BUILD = """
    import pathlib, time
    from zuke import Build, parameter, target

    class Deploy(Build):
        markers = parameter("marker directory").required()
        timeout_ms = parameter("timeout").integer().default(0)

        @target
        def deploy(self, t):
            t = t.lock(lambda s: s.key("life-key").with_ttl("1s"))
            if self.timeout_ms.value:
                t = t.timeout(self.timeout_ms.value)
            return t.executes(self._body)

        def _body(self, ctx):
            markers = pathlib.Path(self.markers.value)
            (markers / "started").write_text("")
            deadline = time.monotonic() + 60
            while not (markers / "release").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the test never released the body")
                time.sleep(0.01)
            (markers / "done").write_text("")
"""


def store_of(workdir: Path) -> FileSystemStateStore:
    return FileSystemStateStore(workdir / ".zuke" / "runs")


def assert_held_for(store: FileSystemStateStore, seconds: float) -> None:
    """The lock stays held for ``seconds`` (several 1 s TTLs): its heartbeat goes on."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert isinstance(store.acquire_lock("life-key", OBSERVER, 1_000), LockHeld)
        time.sleep(0.1)


def test_a_timed_out_body_keeps_its_lock_and_its_process_until_it_returns(tmp_path: Path) -> None:
    write_build(tmp_path, STUBBORN_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "first.log"
    first = spawn(["deploy", "--markers", str(markers), "--timeout-ms", "200"], tmp_path,
                  output=log)  # fmt: skip
    try:
        wait_until(lambda: (markers / "started").exists(), "the body to start")
        wait_until(lambda: "waiting for its body to return" in output_of(log), "the timeout")
        assert first.poll() is None, output_of(log)
        store = store_of(tmp_path)
        assert_held_for(store, 2.5)
        code, out = finish(spawn(["deploy", "--markers", str(markers)], tmp_path))
        assert code == 1 and 'Lock "life-key" is held by' in out, out  # a second run is refused
        (markers / "release").write_text("")
        code, _ = finish(first)
    finally:
        kill(first)
    assert code == 1, output_of(log)
    assert "deploy timed out after 200ms" in output_of(log)
    assert (markers / "done").exists()  # the body finished its work: the process waited for it
    assert isinstance(store.acquire_lock("life-key", OBSERVER, 1_000), LockAcquired)


def test_zuke_cancel_never_frees_a_live_holders_lock(tmp_path: Path) -> None:
    write_build(tmp_path, STUBBORN_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "owner.log"
    owner = spawn(["deploy", "--markers", str(markers)], tmp_path, output=log)
    canceller = None
    try:
        wait_until(lambda: (markers / "started").exists(), "the body to start")
        store = store_of(tmp_path)
        (run,) = store.list_runs()
        canceller = spawn(["cancel", run.id, "--actor", "ops"], tmp_path)

        def status() -> str:
            found = store.get_run(run.id)
            return found.record.status if found else "missing"

        wait_until(lambda: status() == "cancelling", "the run to be marked cancelling")
        assert_held_for(store, 2.5)  # the body still runs: nobody may take its lock
        (markers / "release").write_text("")
        code, out = finish(owner)
        assert code == 130, output_of(log)
        assert "cancelled by ops" in output_of(log)
        code, out = finish(canceller)
        assert code == 0, out
        assert f"Run {run.id} cancelled by its owner" in out
    finally:
        kill(owner)
        if canceller is not None:
            kill(canceller)
    found = store.get_run(run.id)
    assert found is not None and found.record.status == "cancelled"
    assert found.record.targets["deploy"].status == "failed"
    assert (markers / "done").exists()
    assert isinstance(store.acquire_lock("life-key", OBSERVER, 1_000), LockAcquired)
