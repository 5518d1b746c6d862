"""Lock settings are checked when the build loads; reserved key prefixes are refused."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke import Build, BuildDefinitionError, StateStore, execute, parameter, target
from zuke._lock_settings import LockSettings, check_lock
from zuke._redact import Redactor
from zuke.state._protocol import RESERVED_LOCK_PREFIXES, RUN_LEASE_PREFIX
from zuke.state.memory import MemoryStateStore


def two_step_build(store: StateStore, configure: Any, ran: list[str]) -> type[Build]:
    class TwoSteps(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def first(self, t):
            return t.executes(lambda: ran.append("first"))

        @target
        def second(self, t):
            return t.depends_on(self.first).lock(configure).executes(lambda: ran.append("second"))

    return TwoSteps


def test_a_bad_ttl_fails_the_load_before_an_earlier_target_runs() -> None:
    store = MemoryStateStore()
    ran: list[str] = []
    build = two_step_build(store, lambda s: s.key("deploy").with_ttl("4 hours"), ran)
    with pytest.raises(BuildDefinitionError, match="target 'second': lock TTL: '4 hours'"):
        execute(build, ["second"], env={})
    assert ran == [] and store.list_runs() == []


def test_a_bad_ttl_is_a_usage_error_at_the_command_line(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, target

        class B(Build):
            @target
            def first(self, t):
                return t.executes(lambda: print("FIRST RAN"))

            @target
            def second(self, t):
                return (t.depends_on(self.first)
                         .lock(lambda s: s.key("deploy").with_ttl("4 hours"))
                         .executes(lambda: None))
        """
    )
    result = cli("second")
    assert result.code == 2
    assert result.err.startswith("zuke: target 'second': lock TTL: '4 hours' is not a duration")
    assert result.err.count("\n") == 1 and "FIRST RAN" not in result.out


@pytest.mark.parametrize(
    "configure",
    [
        lambda s: s.with_ttl("1h"),  # no key
        lambda s: s.key("deploy"),  # no TTL
        lambda s: s.key("a/b").with_ttl("1h"),
        lambda s: s.lock_key("", "").with_ttl("1h"),
        lambda s: s.key("deploy").with_ttl("1h").on_conflict("not a function"),
    ],
)
def test_every_setting_problem_is_a_load_error(configure: Any) -> None:
    ran: list[str] = []
    with pytest.raises(BuildDefinitionError, match="target 'second'"):
        execute(two_step_build(MemoryStateStore(), configure, ran), ["second"], env={})
    assert ran == []


@pytest.mark.parametrize("prefix", [*RESERVED_LOCK_PREFIXES, "ZUKE-RUN-"])
def test_a_reserved_prefix_is_refused_by_key_and_by_lock_key(prefix: str) -> None:
    with pytest.raises(BuildDefinitionError, match="prefix zuke reserves"):
        LockSettings("t").key(prefix + "some-run")
    parts = prefix.rstrip("-").split("-")
    with pytest.raises(BuildDefinitionError, match="prefix zuke reserves"):
        LockSettings("t").lock_key(*parts, "some-run")


def test_a_build_cannot_take_a_run_lease_through_its_lock() -> None:
    store = MemoryStateStore()
    ran: list[str] = []
    build = two_step_build(store, lambda s: s.key(RUN_LEASE_PREFIX + "abc").with_ttl("1m"), ran)
    with pytest.raises(BuildDefinitionError, match="reserves for its own claims"):
        execute(build, ["second"], env={})
    assert store.list_locks() == []


def test_an_error_of_the_builds_own_code_in_configure_is_left_to_run_time() -> None:
    store = MemoryStateStore()
    ran: list[str] = []
    calls: list[int] = []

    def configure(s: LockSettings) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise LookupError("only known when the target starts")
        s.key("deploy").with_ttl("1m")

    result = execute(two_step_build(store, configure, ran), ["second"], env={})
    assert result.ok and ran == ["first", "second"] and len(calls) == 2


def test_a_lock_on_a_parameter_that_is_not_given_still_lists(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, parameter, target

        class B(Build):
            repo = parameter("repo").required()

            @target
            def deploy(self, t):
                return (t.lock(lambda s: s.lock_key("deploy", self.repo.value).with_ttl("1h"))
                         .executes(lambda: None))
        """
    )
    result = cli("--list")
    assert result.code == 0 and "deploy" in result.out


def test_check_lock_accepts_good_settings_and_refuses_a_secret_key() -> None:
    check_lock("t", lambda s: s.lock_key("deploy", "api").with_ttl("30m"), Redactor())
    secrets = Redactor(["p@ss word!"])
    with pytest.raises(BuildDefinitionError, match="contains the value of a secret") as info:
        check_lock("t", lambda s: s.lock_key("deploy", "p@ss word!").with_ttl("30m"), secrets)
    assert "p_ss_word_" not in str(info.value)


def test_a_parameter_dependent_ttl_is_checked_at_load_too() -> None:
    class B(Build):
        ttl = parameter("ttl").default("1h")

        def state_store(self) -> StateStore:
            return MemoryStateStore()

        @target
        def t(self, t):
            return t.lock(lambda s: s.key("k").with_ttl(self.ttl.value)).executes(lambda: None)

    assert execute(B, ["t"], env={}).ok
    with pytest.raises(BuildDefinitionError, match="lock TTL: 'forever' is not a duration"):
        execute(B, ["t"], params={"ttl": "forever"}, env={})
