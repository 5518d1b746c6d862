"""``s.held_until(target)`` is checked when the build loads: the target must be one of the
build's and run after the locking target (downstream of it), or nothing runs."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke import Build, BuildDefinitionError, StateStore, execute, target
from zuke.state.memory import MemoryStateStore


def chain(store: StateStore, until: Any, ran: list[str]) -> type[Build]:
    """``deploy`` (locked, held until ``until(self)``) → ``promote``; ``lint`` beside them."""

    class Release(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def lint(self, t):
            return t.executes(lambda: ran.append("lint"))

        @target
        def deploy(self, t):
            lock = lambda s: s.key("env-staging").with_ttl("1m").held_until(until(self))  # noqa: E731
            return t.depends_on(self.lint).lock(lock).executes(lambda: ran.append("deploy"))

        @target
        def promote(self, t):
            return t.depends_on(self.deploy).executes(lambda: ran.append("promote"))

    return Release


@pytest.mark.parametrize(
    ("until", "message"),
    [
        (lambda b: b.lint, "held_until('lint') must name a target that runs after 'deploy'"),
        (lambda b: b.deploy, "held_until('deploy') must name a target that runs after 'deploy'"),
        (lambda b: "nowhere", "held_until('nowhere') names no target of this build"),
        (lambda b: 42, "held_until() needs a target of this build (self.<target>), got 42"),
    ],
    ids=["upstream", "itself", "unknown", "not-a-target"],
)
def test_a_held_until_that_is_not_downstream_fails_the_load_naming_both(
    until: Any, message: str
) -> None:
    store = MemoryStateStore()
    ran: list[str] = []
    with pytest.raises(BuildDefinitionError) as caught:
        execute(chain(store, until, ran), ["promote"], env={})
    assert str(caught.value).startswith("target 'deploy': ")
    assert message in str(caught.value)
    assert ran == [] and store.list_runs() == []  # nothing ran, no record


def test_a_downstream_target_loads_and_the_lock_is_given_back_after_it() -> None:
    store = MemoryStateStore()
    ran: list[str] = []
    result = execute(chain(store, lambda b: b.promote, ran), ["promote"], env={})
    assert result.ok and ran == ["lint", "deploy", "promote"]
    assert store.list_locks() == []
    [summary] = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None and found.record.held == {} and found.record.locks == {}


def test_a_run_that_does_not_plan_the_until_target_keeps_it_to_its_end() -> None:
    store = MemoryStateStore()
    ran: list[str] = []
    result = execute(chain(store, lambda b: b.promote, ran), ["deploy"], env={})
    assert result.ok and ran == ["lint", "deploy"] and store.list_locks() == []


def test_the_cli_says_it_in_one_line(write_build: BuildWriter, cli: CliRunner) -> None:
    write_build(
        """
        from zuke import Build, target

        class Release(Build):
            @target
            def promote(self, t):
                return t.executes(lambda: None)

            @target
            def deploy(self, t):
                return (t.depends_on(self.promote)
                        .lock(lambda s: s.key("env").with_ttl("1m").held_until(self.promote))
                        .executes(lambda: None))
        """
    )
    result = cli("deploy")
    assert result.code == 2, result.text
    [line] = result.err.strip().splitlines()
    assert line.startswith("zuke: target 'deploy': held_until('promote') must name a target")
