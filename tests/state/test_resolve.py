"""Which store a run uses, and the errors for a bad configuration."""

from __future__ import annotations

from pathlib import Path

import pytest

from zuke import StateError
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.http import HttpStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.resolve import resolve_store


def test_nothing_configured_and_nothing_required_means_no_store() -> None:
    assert resolve_store(override=None, env={}, required=False) is None


def test_required_state_defaults_to_zuke_runs(tmp_path: Path) -> None:
    store = resolve_store(override=None, env={}, required=True, cwd=tmp_path)
    assert isinstance(store, FileSystemStateStore)
    assert Path(store.directory) == tmp_path / ".zuke" / "runs"


def test_the_build_override_wins_over_the_environment() -> None:
    mine = MemoryStateStore()
    env = {"ZUKE_STATE_URL": "https://state.example", "ZUKE_STATE_DIR": "x"}
    assert resolve_store(override=mine, env=env, required=True) is mine


def test_the_url_wins_over_the_directory(tmp_path: Path) -> None:
    env = {"ZUKE_STATE_URL": "http://127.0.0.1:9/", "ZUKE_STATE_DIR": "runs"}
    assert isinstance(resolve_store(override=None, env=env, required=False), HttpStateStore)


def test_empty_values_count_as_unset(tmp_path: Path) -> None:
    env = {"ZUKE_STATE_URL": "", "ZUKE_STATE_DIR": "d"}
    store = resolve_store(override=None, env=env, required=False, cwd=tmp_path)
    assert isinstance(store, FileSystemStateStore) and Path(store.directory) == tmp_path / "d"


def test_a_plaintext_remote_url_is_refused_naming_the_variable() -> None:
    env = {"ZUKE_STATE_URL": "http://user:pw-9f3@state.example/ns", "ZUKE_STATE_TOKEN": "tk-77aa"}
    with pytest.raises(StateError) as info:
        resolve_store(override=None, env=env, required=False)
    assert "ZUKE_STATE_URL" in str(info.value)
    assert "pw-9f3" not in str(info.value) and "tk-77aa" not in str(info.value)


def test_an_unknown_store_scheme_says_which_package_provides_what() -> None:
    with pytest.raises(StateError, match="no installed package provides it"):
        resolve_store(override=None, env={"ZUKE_STATE": "s3://bucket"}, required=False)
    with pytest.raises(StateError, match="is not a store URL"):
        resolve_store(override=None, env={"ZUKE_STATE": "nonsense"}, required=False)


def test_fsync_policy_comes_from_the_environment(tmp_path: Path) -> None:
    always = resolve_store(override=None, env={"ZUKE_STATE_FSYNC": "always"}, required=True,
                           cwd=tmp_path)  # fmt: skip
    default = resolve_store(override=None, env={}, required=True, cwd=tmp_path)
    assert isinstance(always, FileSystemStateStore) and always.sync_appends is True
    assert isinstance(default, FileSystemStateStore) and default.sync_appends is False
    with pytest.raises(StateError, match="ZUKE_STATE_FSYNC='sometimes': expected"):
        resolve_store(override=None, env={"ZUKE_STATE_FSYNC": "sometimes"}, required=True)
