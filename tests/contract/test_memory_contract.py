"""The store contract suite against ``MemoryStateStore`` (expiry via a ManualClock)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.child import LEAN_PLUGINS
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
from dataclasses import replace

import pytest
from zuke._clock import ManualClock
from zuke.state._protocol import LockEntry, LockHolder, RunQuery, Written
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
        if not self._claims[key].claimed:
            del self._claims[key]


class ForgetsFencesOnDelete(MemoryStateStore):
    def delete_run(self, run_id):
        super().delete_run(run_id)
        self._fence_floor = 0


class ComparesSinceAsText(MemoryStateStore):
    def list_runs(self, query=RunQuery()):
        found = super().list_runs(replace(query, since=None))
        return [s for s in found if query.since is None or s.created_at >= query.since]


class IgnoresBuild(MemoryStateStore):
    def list_runs(self, query=RunQuery()):
        return super().list_runs(replace(query, build=None))


class ListsReleasedLocks(MemoryStateStore):
    def list_locks(self, *, run_id=None):
        return [
            LockEntry(key, state.holder or LockHolder("x", "x", "x"), 0, state.fence)
            for key, state in sorted(self._claims.items())
        ]


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


class TestForgetsFencesOnDelete(StateStoreContract):
    @pytest.fixture
    def store(self):
        return ForgetsFencesOnDelete(clock=ManualClock())


class TestComparesSinceAsText(StateStoreContract):
    @pytest.fixture
    def store(self):
        return ComparesSinceAsText(clock=ManualClock())


class TestIgnoresBuild(StateStoreContract):
    @pytest.fixture
    def store(self):
        return IgnoresBuild(clock=ManualClock())


class TestListsReleasedLocks(StateStoreContract):
    @pytest.fixture
    def store(self):
        return ListsReleasedLocks(clock=ManualClock())
"""


def test_the_contract_suite_fails_stores_that_break_the_contract(tmp_path: Path) -> None:
    (tmp_path / "test_broken.py").write_text(_BROKEN_STORES)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rf", *LEAN_PLUGINS, "test_broken.py"],
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
        "TestForgetsFencesOnDelete::test_fence_strictly_increases_across_deleting_the_holders_run",
        "TestComparesSinceAsText::test_list_runs_compares_since_as_a_time_not_as_text",
        "TestComparesSinceAsText::test_list_runs_since_accepts_an_offset",
        "TestIgnoresBuild::test_list_runs_filters_by_build",
        "TestListsReleasedLocks::"
        "test_list_locks_lists_live_and_expired_claims_but_not_released_ones",
        "TestListsReleasedLocks::test_list_locks_filters_by_the_holders_run",
    }
    assert expected <= failed, child.stdout
