"""The store contract suite against ``FileSystemStateStore``.

Racers get their own store instance on the same directory, so the concurrency
scenarios exercise the on-disk mutex rather than shared Python state; expiry is
a ManualClock shared by all instances (the default ``lapse`` hook advances it).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from zuke._clock import ManualClock
from zuke.state._protocol import StateStore
from zuke.state.filesystem import FileSystemStateStore
from zuke.testing.store_contract import StateStoreContract


class TestFileSystemStoreContract(StateStoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> FileSystemStateStore:
        return FileSystemStateStore(tmp_path / "runs", clock=ManualClock())

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        assert isinstance(store, FileSystemStateStore)
        return FileSystemStateStore(store.directory, clock=store.clock)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("shared-runs")


class TestFileSystemStoreContractSharedDirectory(StateStoreContract):
    """The suite must survive a shared, persistent backend: every scenario on one directory."""

    @pytest.fixture
    def store(self, shared: Path) -> FileSystemStateStore:
        return FileSystemStateStore(shared, clock=ManualClock())
