"""The store contract suite against ``MemoryStateStore`` (expiry via a ManualClock)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke.state.memory import MemoryStateStore
from zuke.testing.store_contract import StateStoreContract


class TestMemoryStoreContract(StateStoreContract):
    @pytest.fixture
    def store(self) -> MemoryStateStore:
        # The default `lapse` hook advances a ManualClock found on `store.clock`.
        return MemoryStateStore(clock=ManualClock())


# The suite must be able to fail: run it, in a child pytest, against stores with
# one deliberate defect each, and check that the scenario guarding that property
# is among the failures.
_BROKEN_STORES = """
import pytest
from zuke._clock import ManualClock
from zuke.state._protocol import Written
from zuke.state.memory import MemoryStateStore
from zuke.testing.store_contract import StateStoreContract


class IgnoresVersions(MemoryStateStore):
    def put_run(self, record, *, expected_version):
        current = self.get_run(record.id)
        if current is None:
            return super().put_run(record, expected_version=expected_version)
        return super().put_run(record, expected_version=current.version)


class ForgetsFencesOnRelease(MemoryStateStore):
    def release_lock(self, key, token):
        super().release_lock(key, token)
        self._fences.pop(key, None)


class IgnoresExpiry(MemoryStateStore):
    def acquire_lock(self, key, holder, ttl_ms):
        return super().acquire_lock(key, holder, 10**12)


class TestIgnoresVersions(StateStoreContract):
    @pytest.fixture
    def store(self):
        return IgnoresVersions(clock=ManualClock())


class TestForgetsFencesOnRelease(StateStoreContract):
    @pytest.fixture
    def store(self):
        return ForgetsFencesOnRelease(clock=ManualClock())


class TestIgnoresExpiry(StateStoreContract):
    @pytest.fixture
    def store(self):
        return IgnoresExpiry(clock=ManualClock())
"""


def test_the_contract_suite_fails_stores_that_break_the_contract(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text(_BROKEN_STORES)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", "-p", "no:cacheprovider", "test_broken.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    failed = set(re.findall(r"^FAILED test_broken\.py::(\w+::\w+)", child.stdout, re.M))
    assert child.returncode == 1, child.stdout + child.stderr
    expected = {
        "TestIgnoresVersions::test_put_at_a_stale_version_conflicts",
        "TestIgnoresVersions::test_two_concurrent_writers_at_one_version_exactly_one_wins",
        "TestIgnoresVersions::test_a_recreated_run_does_not_accept_the_old_version",
        "TestForgetsFencesOnRelease::test_fence_strictly_increases_across_acquire_release_acquire",
        "TestIgnoresExpiry::test_an_expired_lock_is_taken_over_and_the_evicted_token_cannot_renew",
        "TestIgnoresExpiry::test_fence_strictly_increases_across_an_expiry_takeover",
    }
    assert expected <= failed, child.stdout
