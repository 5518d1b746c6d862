"""Cross-run locks between real ``zuke`` processes: races, kill -9, heartbeats, renewals."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build
from tests.serve.support import TOKEN, running_server
from zuke import LockAcquired, LockHeld, LockHolder
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.http import HttpStateStore

pytestmark = pytest.mark.e2e

RACE_BUILD = """
    import os, time, pathlib
    from zuke import Build, parameter, target

    class Race(Build):
        markers = parameter("marker directory").required()
        ttl = parameter("lock TTL").default("1m")

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("race-key").with_ttl(self.ttl.value)).executes(self._body)

        def _body(self, ctx):
            markers = pathlib.Path(self.markers.value)
            (markers / f"winner-{os.getpid()}").write_text(str(ctx.lock.fence))
            deadline = time.monotonic() + 60
            while not (markers / "release").exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the test never released the winner")
                time.sleep(0.01)
"""

OBSERVER = LockHolder(actor="test", run_id="observer", since="2026-01-01T00:00:00.000Z")


def race_once(workdir: Path, round_no: int, env: dict[str, str] | None = None) -> None:
    markers = workdir / f"round-{round_no}"
    markers.mkdir()
    procs = [spawn(["deploy", "--markers", str(markers)], workdir, env) for _ in range(12)]
    try:
        wait_until(lambda: sum(p.poll() is not None for p in procs) >= 11, "11 losers to exit")
        losers = [p for p in procs if p.poll() is not None]
        winners = list(markers.glob("winner-*"))
        assert len(winners) == 1, f"round {round_no}: {len(winners)} bodies ran"
        for proc in losers:
            code, out = finish(proc)
            assert code == 1, out
            assert 'Lock "race-key" is held by' in out, out
        (markers / "release").write_text("")
        (winner,) = [p for p in procs if p not in losers]
        code, out = finish(winner)
        assert code == 0, out
    finally:
        for proc in procs:
            kill(proc)


def test_twelve_processes_race_one_key_and_exactly_one_runs(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    for round_no in range(10):
        race_once(tmp_path, round_no)


def test_twelve_processes_race_one_key_against_zuke_serve(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    with running_server(tmp_path) as server:
        env = {"ZUKE_STATE_URL": server.url, "ZUKE_STATE_TOKEN": TOKEN}
        for round_no in range(10):
            race_once(tmp_path, round_no, env)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = spawn(["deploy", "--markers", str(markers), "--ttl", "3s"], tmp_path)
    yield proc, markers
    kill(proc)


def test_a_killed_holders_lock_is_held_until_its_ttl_then_free(
    tmp_path: Path, holder: tuple[subprocess.Popen[str], Path]
) -> None:
    proc, markers = holder
    wait_until(lambda: any(markers.glob("winner-*")), "the holder's body to start")
    kill(proc)
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    assert isinstance(store.acquire_lock("race-key", OBSERVER, 1000), LockHeld)
    wait_until(
        lambda: isinstance(store.acquire_lock("race-key", OBSERVER, 60_000), LockAcquired),
        "the dead holder's lock to lapse",
    )


def test_a_killed_runs_lease_lapses_at_its_ttl(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = spawn(["deploy", "--markers", str(markers)], tmp_path, {"ZUKE_RUN_LEASE_TTL": "3s"})
    try:
        wait_until(lambda: any(markers.glob("winner-*")), "the body to start")
        store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
        (run,) = store.list_runs()
        kill(proc)
        lease = f"zuke-run-{run.id}"
        assert isinstance(store.acquire_lock(lease, OBSERVER, 1000), LockHeld)
        wait_until(
            lambda: isinstance(store.acquire_lock(lease, OBSERVER, 60_000), LockAcquired),
            "the dead run's lease to lapse",
        )
        found = store.get_run(run.id)
        assert found is not None and found.record.status == "running"
    finally:
        kill(proc)


HEARTBEAT_BUILD = """
    import asyncio, pathlib, time
    from zuke import Build, parameter, target

    class Heart(Build):
        markers = parameter("marker directory").required()

        @target
        def busy_sync(self, t):
            return t.lock(lambda s: s.key("beat-key").with_ttl("1s")).executes(self._busy)

        def _busy(self):
            markers = pathlib.Path(self.markers.value)
            (markers / "started").write_text("")
            end = time.monotonic() + 4
            n = 0
            while time.monotonic() < end:   # CPU-bound: holds the GIL between switches
                n += 1
            (markers / "done").write_text(str(n))

        @target
        def waiting_async(self, t):
            return t.lock(lambda s: s.key("beat-key").with_ttl("1s")).executes(self._wait)

        async def _wait(self):
            markers = pathlib.Path(self.markers.value)
            (markers / "started").write_text("")
            await asyncio.sleep(4)
            (markers / "done").write_text("")
"""


@pytest.mark.parametrize("which", ["busy_sync", "waiting_async"])
def test_a_live_holder_keeps_a_short_ttl_lock_through_a_long_body(
    tmp_path: Path, which: str
) -> None:
    write_build(tmp_path, HEARTBEAT_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = spawn([which, "--markers", str(markers)], tmp_path)
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    attempts: list[object] = []
    try:
        wait_until(lambda: (markers / "started").exists(), "the body to start")
        while not (markers / "done").exists():
            attempts.append(store.acquire_lock("beat-key", OBSERVER, 60_000))
            if proc.poll() is not None:
                break
            time.sleep(0.1)  # paces the observer's attempts; nothing waits on it
        code, out = finish(proc)
    finally:
        kill(proc)
    assert code == 0, out
    assert len(attempts) >= 10
    assert all(isinstance(a, LockHeld) for a in attempts), "the lock lapsed during the body"


RENEWAL_BUILD = """
    import asyncio, pathlib
    from zuke import Build, StoreUnavailableError, parameter, target
    from zuke.state.filesystem import FileSystemStateStore

    MARKERS = pathlib.Path(__file__).parent / "markers"

    class FaultyRenewals(FileSystemStateStore):
        def renew_lock(self, key, token, ttl_ms):
            if key == "renew-key" and (MARKERS / "refuse").exists():
                (MARKERS / "renewal-refused").write_text("")
                return False
            if key == "renew-key" and (MARKERS / "fail").exists():
                (MARKERS / "renewal-failed").write_text("")
                raise StoreUnavailableError("state: the state service answered 503")
            return super().renew_lock(key, token, ttl_ms)

    class Renewals(Build):
        def state_store(self):
            return FaultyRenewals(pathlib.Path(__file__).parent / ".zuke" / "runs")

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("renew-key").with_ttl(2_000)).executes(self._body)

        async def _body(self):
            while not (MARKERS / "renewal-failed").exists():
                await asyncio.sleep(0.01)    # a refused renewal stops us before this ends
            (MARKERS / "body-finished").write_text("")

        @target
        def after(self, t):
            return t.depends_on(self.deploy).executes(lambda: (MARKERS / "after").write_text(""))
"""


def test_a_refused_renewal_stops_the_run(tmp_path: Path) -> None:
    write_build(tmp_path, RENEWAL_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "refuse").write_text("")
    code, out = finish(spawn(["after"], tmp_path))
    assert code == 1, out
    assert (markers / "renewal-refused").exists()
    assert 'lock "renew-key" was lost while this target ran' in out
    assert not (markers / "body-finished").exists() and not (markers / "after").exists()


def test_a_failing_renewal_is_retried_and_the_run_finishes(tmp_path: Path) -> None:
    write_build(tmp_path, RENEWAL_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    (markers / "fail").write_text("")
    code, out = finish(spawn(["after"], tmp_path))
    assert code == 0, out
    assert "renewing renew-key failed" in out
    assert (markers / "body-finished").exists() and (markers / "after").exists()


def test_zuke_cancel_of_a_killed_run_settles_it_and_frees_its_lock(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    env = {"ZUKE_RUN_LEASE_TTL": "1s"}
    proc = spawn(["deploy", "--markers", str(markers), "--ttl", "1s"], tmp_path, env)
    try:
        wait_until(lambda: any(markers.glob("winner-*")), "the body to start")
        store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
        (run,) = store.list_runs()
        kill(proc)  # kill -9: the lease and the lock lapse, nobody settles the record
        code, out = finish(spawn(["cancel", run.id, "--actor", "ops", "--wait", "30s"], tmp_path))
        assert code == 0, out
        assert f"Run {run.id} cancelled; its owner was gone. Released 1 claim(s) (race-key)." in out
        found = store.get_run(run.id)
        assert found is not None and found.record.status == "cancelled"
        assert found.record.events[-1].tool == "cancel" and found.record.events[-1].actor == "ops"
        assert isinstance(store.acquire_lock("race-key", OBSERVER, 1000), LockAcquired)
        code, out = finish(spawn(["cancel", run.id], tmp_path))
        assert code == 0 and f"Run {run.id} is already cancelled; nothing to cancel." in out
    finally:
        kill(proc)


def test_http_store_lock_holder_is_visible_to_other_processes(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    with running_server(tmp_path) as server:
        env = {"ZUKE_STATE_URL": server.url, "ZUKE_STATE_TOKEN": TOKEN}
        proc = spawn(["deploy", "--markers", str(markers)], tmp_path, env)
        try:
            wait_until(lambda: any(markers.glob("winner-*")), "the body to start")
            with HttpStateStore(server.url, token=TOKEN) as store:
                held = store.acquire_lock("race-key", OBSERVER, 1000)
                assert isinstance(held, LockHeld) and held.holder.actor
            (markers / "release").write_text("")
            code, out = finish(proc)
            assert code == 0, out
        finally:
            kill(proc)


def test_ctrl_c_cancels_the_run_records_it_and_releases_its_lock(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = spawn(["deploy", "--markers", str(markers)], tmp_path)
    try:
        wait_until(lambda: any(markers.glob("winner-*")), "the body to start")
        proc.send_signal(signal.SIGINT)
        (markers / "release").write_text("")  # lets the (sync) body return once told
        code, out = finish(proc)
    finally:
        kill(proc)
    assert code == 130, out
    assert "SIGINT: cancelling the run" in out
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (run,) = store.list_runs()
    found = store.get_run(run.id)
    assert found is not None and found.record.status == "cancelled"
    assert found.record.locks == {}
    assert isinstance(store.acquire_lock("race-key", OBSERVER, 1000), LockAcquired)


def test_a_second_ctrl_c_exits_at_once(tmp_path: Path) -> None:
    write_build(tmp_path, RACE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    log = tmp_path / "out.log"
    proc = spawn(["deploy", "--markers", str(markers)], tmp_path, output=log)
    try:
        wait_until(lambda: any(markers.glob("winner-*")), "the body to start")
        proc.send_signal(signal.SIGINT)
        wait_until(lambda: "SIGINT: cancelling the run" in output_of(log), "the first SIGINT")
        proc.send_signal(signal.SIGINT)  # the body ignores ctx.cancelled: only this ends it
        code, _ = finish(proc)
    finally:
        kill(proc)
    assert code == 130, output_of(log)
