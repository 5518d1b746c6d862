"""``zuke locks list|break`` in-process, on a memory store (via a build) and the filesystem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import CliRunner
from zuke import Build
from zuke._build import RESERVED_TARGET_NAMES
from zuke._clock import SYSTEM_CLOCK, ManualClock
from zuke.cli.listing import USAGE
from zuke.state._protocol import LockAcquired, StateStore, lease_key
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.records import LockHolder

HOLDER = LockHolder(actor="alice", run_id="r1", since="2026-01-01T00:00:00.000Z")


def build_on(store: StateStore) -> type[Build]:
    class Ops(Build):
        def state_store(self) -> StateStore:
            return store

    return Ops


@pytest.fixture(params=["memory", "filesystem"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> StateStore:
    # The store's clock runs ten minutes behind: a 1 ms claim has lapsed by the
    # CLI's clock, a one-hour claim has not, with no waiting.
    clock = ManualClock(SYSTEM_CLOCK.now_ms() - 600_000)
    if request.param == "memory":
        return MemoryStateStore(clock=clock)
    return FileSystemStateStore(tmp_path / ".zuke" / "runs", clock=clock)


def hold(store: StateStore, key: str, who: LockHolder = HOLDER, ttl_ms: int = 3_600_000) -> int:
    taken = store.acquire_lock(key, who, ttl_ms)
    assert isinstance(taken, LockAcquired)
    return taken.fence


def test_locks_list_shows_each_claim_with_holder_run_expiry_and_fence(
    store: StateStore, cli: CliRunner
) -> None:
    hold(store, "deploy-api")
    hold(store, "db-migrate", LockHolder("bob", "r2", "2026-01-02T00:00:00.000Z"), ttl_ms=1)
    result = cli("locks", "list", build=build_on(store))
    assert result.code == 0, result.text
    lines = result.out.splitlines()
    assert lines[0].split() == ["KEY", "ACTOR", "RUN", "SINCE", "EXPIRES", "FENCE"]
    assert lines[1].split()[:4] == ["db-migrate", "bob", "r2", "2026-01-02T00:00:00.000Z"]
    assert "(lapsed)" in lines[1] and "(lapsed)" not in lines[2]
    assert lines[2].split()[:3] == ["deploy-api", "alice", "r1"]
    assert cli("locks", build=build_on(store)).out == result.out


def test_locks_list_json_is_machine_readable(store: StateStore, cli: CliRunner) -> None:
    fence = hold(store, "deploy-api")
    result = cli("locks", "list", "--json", build=build_on(store))
    (entry,) = json.loads(result.out)
    assert entry["key"] == "deploy-api" and entry["fence"] == fence
    assert entry["holder"] == {"actor": "alice", "runId": "r1", "since": HOLDER.since}
    assert entry["lapsed"] is False and entry["expiresAt"].endswith("Z")


def test_locks_list_escapes_control_characters(cli: CliRunner) -> None:
    store = MemoryStateStore()
    hold(store, "k", LockHolder("evil\x1b[2J", "r1", "s"))
    result = cli("locks", "list", build=build_on(store))
    assert "\x1b" not in result.out and "evil\\x1b[2J" in result.out
    assert "\x1b" not in cli("locks", "list", "--json", build=build_on(store)).out


def test_locks_list_says_when_nothing_is_held(store: StateStore, cli: CliRunner) -> None:
    assert cli("locks", "list", build=build_on(store)).out.strip().startswith("No locks held in ")


def test_locks_break_is_refused_while_the_holder_runs(store: StateStore, cli: CliRunner) -> None:
    hold(store, lease_key("r1"))
    hold(store, "deploy-api")
    result = cli("locks", "break", "deploy-api", "--reason", "stuck", build=build_on(store))
    assert result.code == 1, result.text
    (line,) = result.err.splitlines()
    assert line.startswith("zuke: ") and "held by alice (run r1)" in line
    assert "--force" in line and "two holders overlap" in line
    assert [e.key for e in store.list_locks()] == ["deploy-api", lease_key("r1")]


def test_locks_break_force_removes_the_claim(store: StateStore, cli: CliRunner) -> None:
    hold(store, lease_key("r1"))
    fence = hold(store, "deploy-api")
    result = cli(
        "locks", "break", "deploy-api", "--reason", "stuck", "--force", "--actor", "ops",
        build=build_on(store),
    )  # fmt: skip
    assert result.code == 0, result.text
    assert 'Broke lock "deploy-api" held by alice (run r1).' in result.out
    assert "run r1 is not in the store; the break is not recorded" in result.err
    assert hold(store, "deploy-api", LockHolder("bob", "r2", "s")) > fence


def test_locks_break_needs_a_reason(store: StateStore, cli: CliRunner) -> None:
    result = cli("locks", "break", "deploy-api", build=build_on(store))
    assert result.code == 2
    assert "--reason" in result.err and result.err.startswith("zuke: ")


def test_locks_is_a_command_in_the_help_and_a_reserved_target_name(cli: CliRunner) -> None:
    assert "  locks list [--json]\n  locks break KEY --reason TEXT" in USAGE
    assert "locks" in RESERVED_TARGET_NAMES
