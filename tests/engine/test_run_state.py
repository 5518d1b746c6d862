"""Runs recorded in a state store: the record's shape and the durability rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.engine.builds import chain_build
from zuke import Build, Context, DurationError, StateStore, execute, parameter, target
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.memory import MemoryStateStore
from zuke.state.wire import record_to_json


def stored(store: StateStore, run_id: str):
    found = store.get_run(run_id)
    assert found is not None
    return found.record


def make_build(store: StateStore, seen: dict[str, object]) -> type[Build]:
    class Recorded(Build):
        repo = parameter("repo").default("api")
        token = parameter("token").secret()

        def state_store(self) -> StateStore:
            return store

        @target
        def first(self, t):
            return t.executes(self._first)

        def _first(self, ctx: Context) -> None:
            # The record says this target is running before its body runs.
            seen["first_running"] = stored(store, ctx.run_id).targets["first"].status
            ctx.state.set({"slot": "sit-7", "nested": {"a": 1}})
            ctx.state.set({"nested": {"b": 2}, "gone": None})

        @target
        def second(self, t):
            return t.depends_on(self.first).executes(self._second)

        def _second(self, ctx: Context) -> None:
            record = stored(store, ctx.run_id)
            seen["first_when_second_runs"] = record.targets["first"].status
            seen["first_meta_when_second_runs"] = dict(record.targets["first"].meta)
            seen["outcome"] = ctx.outcome_of("first")
            seen["state_of"] = ctx.state_of(self.first).get()

        @target
        def broken(self, t):
            return t.executes(
                lambda: (_ for _ in ()).throw(RuntimeError(f"bad {self.token.value}"))
            )

    return Recorded


def test_a_recorded_run_has_the_documented_shape() -> None:
    store = MemoryStateStore()
    seen: dict[str, object] = {}
    result = execute(
        make_build(store, seen),
        ["second"],
        params={"token": "t0p-secret"},
        env={"ZUKE_BUILD_ID": "acme/app"},
        actor="alice",
    )
    assert result.ok and result.recorded
    record = stored(store, result.run_id)
    wire = record_to_json(record)
    assert wire["build"] == "Recorded" and wire["buildId"] == "acme/app"
    assert wire["rootTarget"] == "second" and wire["status"] == "succeeded"
    assert wire["actor"] == "alice"
    assert wire["graph"] == [
        {"name": "first", "dependsOn": []},
        {"name": "second", "dependsOn": ["first"]},
    ]
    assert wire["params"] == {}  # defaults are not recorded; the secret never is
    assert "t0p-secret" not in json.dumps(wire)
    assert wire["targets"]["first"]["meta"] == {"slot": "sit-7", "nested": {"a": 1, "b": 2}}
    assert wire["targets"]["second"]["status"] == "succeeded"
    assert {"startedAt", "endedAt"} <= set(wire["targets"]["second"])
    assert wire["degraded"] is False


def test_running_is_recorded_before_a_body_and_success_before_a_dependent() -> None:
    store = MemoryStateStore()
    seen: dict[str, object] = {}
    execute(make_build(store, seen), ["second"], env={})
    assert seen["first_running"] == "running"
    assert seen["first_when_second_runs"] == "succeeded"
    assert seen["first_meta_when_second_runs"] == {"slot": "sit-7", "nested": {"a": 1, "b": 2}}
    assert seen["state_of"] == {"slot": "sit-7", "nested": {"a": 1, "b": 2}}
    assert getattr(seen["outcome"], "status", None) == "succeeded"


def test_supplied_parameters_are_recorded_and_secrets_redacted_from_errors() -> None:
    store = MemoryStateStore()
    result = execute(
        make_build(store, {}), ["broken"], params={"repo": "web", "token": "t0p-secret"}, env={}
    )
    record = stored(store, result.run_id)
    assert record.status == "failed"
    assert record.params == {"repo": "web"}
    assert record.targets["broken"].error == "RuntimeError: bad [redacted]"


def test_a_plain_build_writes_nothing() -> None:
    class Plain(Build):
        @target
        def a(self, t):
            return t.executes(lambda: None)

    result = execute(Plain, ["a"], env={})
    assert result.ok and not result.recorded


def test_state_dir_from_the_environment_is_used(tmp_path: Path) -> None:
    class Plain(Build):
        @target
        def a(self, t):
            return t.executes(lambda: None)

    result = execute(Plain, ["a"], env={"ZUKE_STATE_DIR": str(tmp_path / "runs")})
    assert result.recorded
    assert stored(FileSystemStateStore(tmp_path / "runs"), result.run_id).status == "succeeded"


def test_a_bad_deadline_is_a_definition_error_before_anything_runs() -> None:
    ran: list[str] = []
    store = MemoryStateStore()

    class Late(Build):
        def deadline(self) -> str:
            return "soon"

        def state_store(self) -> StateStore:
            return store

        @target
        def a(self, t):
            return t.executes(lambda: ran.append("a"))

    with pytest.raises(DurationError, match=r"Build\.deadline\(\): .soon. is not a duration"):
        execute(Late, ["a"], env={})
    assert ran == [] and store.list_runs() == []


def test_the_deadline_is_stamped_on_the_record() -> None:
    store = MemoryStateStore()

    class Timed(Build):
        def deadline(self) -> str:
            return "45m"

        def state_store(self) -> StateStore:
            return store

        @target
        def a(self, t):
            return t.executes(lambda: None)

    result = execute(Timed, ["a"], env={})
    record = stored(store, result.run_id)
    assert record.deadline_at is not None and record.deadline_at > record.created_at


def test_a_chain_persists_with_about_one_write_per_target(tmp_path: Path) -> None:
    store = FileSystemStateStore(tmp_path / "runs")
    chain = chain_build(200, state_store=lambda self: store)
    result = execute(chain, ["t199"], env={})
    record = stored(store, result.run_id)
    assert all(t.status == "succeeded" for t in record.targets.values())
    final_size = len(json.dumps(record_to_json(record)))
    # Linear: the bytes written stay within a small multiple of the final record.
    assert store.bytes_written < 6 * final_size
