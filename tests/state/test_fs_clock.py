"""The filesystem store judges lock and lease expiry by the filesystem's time, not a process's.

A sweeper whose clock runs two hours ahead must not see a live lease as
lapsed, take it, or write an expiry two hours late (issue 15, item 26). The
store stamps a file and reads its mtime back, so every process sharing the
directory reads one time; the process clock is :func:`time.time_ns`, moved
here for one store's calls only.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke.state._protocol import LockAcquired, LockHeld
from zuke.state.filesystem import FileSystemStateStore
from zuke.testing.store_contract import sample_holder

HOURS_2 = 2 * 3600 * 1000
TTL = 60_000
LEASE = "zuke-run-run-1"


@contextlib.contextmanager
def clock_ahead(monkeypatch: pytest.MonkeyPatch, ms: int = HOURS_2) -> Iterator[None]:
    """This process's clock ``ms`` ahead of the machine's, for the block."""
    real = time.time_ns
    with monkeypatch.context() as patch:
        patch.setattr(time, "time_ns", lambda: real() + ms * 1_000_000)
        patch.setattr(time, "time", lambda: real() / 1e9 + ms / 1000)
        yield


def claim(directory: Path, key: str) -> dict[str, object]:
    return dict(json.loads((directory / "locks" / f"{key}.json").read_text()))


def test_a_store_whose_clock_runs_ahead_cannot_take_a_live_lease(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = FileSystemStateStore(tmp_path)
    held = owner.acquire_lock(LEASE, sample_holder("run-1"), TTL)
    assert isinstance(held, LockAcquired)
    sweeper = FileSystemStateStore(tmp_path)
    with clock_ahead(monkeypatch):
        assert time.time_ns() // 1_000_000 > int(str(claim(tmp_path, LEASE)["expiresAt"]))
        taken = sweeper.acquire_lock(LEASE, sample_holder("sweeper"), TTL)
        assert isinstance(taken, LockHeld)
        assert taken.holder.run_id == "run-1"
    assert owner.renew_lock(LEASE, held.token, TTL), "the owner still holds it"
    owner.release_lock(LEASE, held.token)
    with clock_ahead(monkeypatch):
        after = sweeper.acquire_lock(LEASE, sample_holder("sweeper"), TTL)
    assert isinstance(after, LockAcquired)
    assert after.fence > held.fence, "fences never go back"


def test_a_store_whose_clock_runs_ahead_writes_expiry_in_the_shared_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ahead = FileSystemStateStore(tmp_path)
    with clock_ahead(monkeypatch):
        taken = ahead.acquire_lock("deploy", sample_holder("run-2"), TTL)
        assert isinstance(taken, LockAcquired)
        assert ahead.renew_lock("deploy", taken.token, TTL)
    expires = claim(tmp_path, "deploy")["expiresAt"]
    assert isinstance(expires, int)
    fs_now = FileSystemStateStore(tmp_path).clock.now_ms()
    assert fs_now < expires <= fs_now + TTL, "the claim lives one TTL, not two hours more"
    other = FileSystemStateStore(tmp_path).acquire_lock("deploy", sample_holder("run-3"), TTL)
    assert isinstance(other, LockHeld)
    (listed,) = ahead.list_locks()
    assert listed.expires_at == expires


def test_a_store_whose_clock_runs_behind_does_not_write_an_early_expiry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    behind = FileSystemStateStore(tmp_path)
    with clock_ahead(monkeypatch, -HOURS_2):
        taken = behind.acquire_lock("deploy", sample_holder("run-2"), TTL)
    assert isinstance(taken, LockAcquired)
    refused = FileSystemStateStore(tmp_path).acquire_lock("deploy", sample_holder("run-3"), TTL)
    assert isinstance(refused, LockHeld), "its claim is live for everybody else"


def test_the_stores_clock_reads_the_filesystems_time(tmp_path: Path) -> None:
    store = FileSystemStateStore(tmp_path)
    marker = tmp_path / "written-before"
    marker.write_text("")
    first = store.clock.now_ms()
    assert first >= marker.stat().st_mtime_ns // 1_000_000
    assert store.clock.now_ms() >= first
    assert (tmp_path / "locks" / "@clock").exists()


def test_an_injected_clock_still_judges_expiry(tmp_path: Path) -> None:
    clock = ManualClock()
    store = FileSystemStateStore(tmp_path, clock=clock)
    taken = store.acquire_lock("deploy", sample_holder("run-1"), TTL)
    assert isinstance(taken, LockAcquired)
    assert claim(tmp_path, "deploy")["expiresAt"] == clock.now_ms() + TTL
    clock.advance(TTL)
    again = store.acquire_lock("deploy", sample_holder("run-2"), TTL)
    assert isinstance(again, LockAcquired) and again.fence == taken.fence + 1
