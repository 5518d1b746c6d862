"""A secret parameter's value never reaches an exception, the record or the console.

One test per path that leaked: errors raised before any target runs, array
elements, numbers in ``ctx.state.set``, other parameters and defaults, lock
keys, parse errors of another parameter; plus the short-secret rule.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from typing import Any

import pytest

from zuke import (
    Build,
    BuildDefinitionError,
    Context,
    ParameterError,
    StateStore,
    Target,
    execute,
    parameter,
    target,
)
from zuke._engine.preflight import scrub
from zuke._redact import Redactor
from zuke.state.memory import MemoryStateStore
from zuke.state.wire import record_to_json

SECRET = "hunter2-hunter2"


def everything_about(exc: BaseException) -> str:
    """The exception as a caller could see it: message, args, notes and the whole chain."""
    return "".join(traceback.format_exception(exc)) + repr(exc.args)


def recorded(store: MemoryStateStore) -> str:
    """Every stored record, as the JSON a store keeps."""
    texts = []
    for summary in store.list_runs():
        stored = store.get_run(summary.id)
        assert stored is not None
        texts.append(json.dumps(record_to_json(stored.record), ensure_ascii=False))
    return "\n".join(texts)


def raises_before_anything(build: type[Build], **params: str) -> BaseException:
    with pytest.raises(BuildDefinitionError) as info:
        execute(build, ["t"], params=params, env={})
    return info.value


# -- errors raised before any target runs ---------------------------------------


def test_a_secret_used_as_a_timeout_is_not_in_the_error() -> None:
    class B(Build):
        token = parameter("t").secret()

        @target
        def t(self, t):
            return t.timeout(self.token.value).executes(lambda: None)

    error = raises_before_anything(B, token=SECRET)
    assert "timeout()" in str(error) and "[redacted]" in str(error)
    assert SECRET not in everything_about(error)


def test_a_secret_used_as_a_retry_delay_is_not_in_the_error() -> None:
    class B(Build):
        token = parameter("t").secret()

        @target
        def t(self, t):
            return t.retry(2, self.token.value).executes(lambda: None)

    error = raises_before_anything(B, token=SECRET)
    assert "retry() delay" in str(error)
    assert SECRET not in everything_about(error)


def test_a_secret_returned_by_deadline_is_not_in_the_error() -> None:
    class B(Build):
        token = parameter("t").secret()

        def deadline(self) -> str | None:
            return self.token.value

        @target
        def t(self, t):
            return t.executes(lambda: None)

    error = raises_before_anything(B, token=SECRET)
    assert "Build.deadline()" in str(error)
    assert SECRET not in everything_about(error)


def test_a_definition_method_exception_is_scrubbed_with_its_cause() -> None:
    class B(Build):
        token = parameter("t").secret()

        @target
        def t(self, t):
            raise RuntimeError(f"cannot use {self.token.value}")

    error = raises_before_anything(B, token=SECRET)
    assert "defining the targets of B failed: cannot use [redacted]" in str(error)
    assert isinstance(error.__cause__, RuntimeError)  # the cause is kept, cleaned
    assert SECRET not in everything_about(error)


def test_an_order_with_failure_is_scrubbed() -> None:
    class B(Build):
        token = parameter("t").secret()

        async def order_with(self, targets: Mapping[str, Target]) -> list[tuple[Target, Target]]:
            raise ValueError(f"no ordering for {self.token.value}")

        @target
        def t(self, t):
            return t.executes(lambda: None)

    error = raises_before_anything(B, token=SECRET)
    assert "Failed to resolve ordering edges" in str(error)
    assert SECRET not in everything_about(error)


def test_a_secret_quoted_with_repr_escapes_is_redacted_too() -> None:
    tricky = "it's-a\\secret"

    class B(Build):
        token = parameter("t").secret()

        @target
        def t(self, t):
            return t.timeout(self.token.value).executes(lambda: None)

    error = raises_before_anything(B, token=tricky)
    assert repr(tricky)[1:-1] not in str(error) and tricky not in str(error)


def test_a_chain_link_that_cannot_be_cleaned_is_cut() -> None:
    class Opaque(Exception):
        def __str__(self) -> str:
            return f"opaque {SECRET}"

    try:
        try:
            raise Opaque()
        except Opaque as inner:
            raise BuildDefinitionError("outer") from inner
    except BuildDefinitionError as exc:
        clean = scrub(exc, Redactor([SECRET]))
    assert clean.__cause__ is None and SECRET not in everything_about(clean)
    replaced = scrub(Opaque(), Redactor([SECRET]))
    assert isinstance(replaced, BuildDefinitionError) and str(replaced) == "opaque [redacted]"


# -- values during the run -----------------------------------------------------


def stored_build(store: StateStore, declare: dict[str, Any], body: Any) -> type[Build]:
    def state_store(self: Build) -> StateStore:
        return store

    def t(self: Build, t: Any) -> Any:
        return t.executes(lambda ctx: body(self, ctx))

    return type("Stored", (Build,), {**declare, "state_store": state_store, "t": target(t)})


def test_each_element_of_an_array_secret_is_redacted() -> None:
    store = MemoryStateStore()

    def body(build: Any, ctx: Context) -> None:
        first, second = build.keys.value
        ctx.state.set({"used": first})
        raise RuntimeError(f"second key {second} refused")

    build = stored_build(store, {"keys": parameter("k").array().secret()}, body)
    result = execute(build, ["t"], params={"keys": "alpha-key-1,beta-key-22"}, env={})
    assert result.outcomes["t"].error is not None
    text = recorded(store)
    assert "[redacted]" in text
    assert "alpha-key-1" not in text and "beta-key-22" not in text


@pytest.mark.parametrize(
    ("declare", "given", "written"),
    [
        (parameter("pin").integer().secret(), "12345678", 12345678),
        (parameter("ratio").number().secret(), "31415926.5", 31415926.5),
        (parameter("whole").number().secret(), "87654321", 87654321),
    ],
)
def test_number_and_integer_secrets_written_with_state_set_are_redacted(
    declare: Any, given: str, written: float
) -> None:
    store = MemoryStateStore()

    def body(build: Any, ctx: Context) -> None:
        value = build.p.value
        ctx.state.set(
            {"value": value, "spelled": str(int(value) if value == int(value) else value)}
        )

    build = stored_build(store, {"p": declare}, body)
    assert execute(build, ["t"], params={"p": given}, env={}).ok
    text = recorded(store)
    assert str(written) not in text and given not in text
    assert '"value": "[redacted]"' in text and '"spelled": "[redacted]"' in text


def test_another_parameters_value_that_contains_a_secret_is_redacted_in_the_record() -> None:
    store = MemoryStateStore()
    declare = {"token": parameter("t").secret(), "url": parameter("u")}
    build = stored_build(store, declare, lambda b, ctx: None)
    url = f"https://deploy:{SECRET}@example.test/"
    assert execute(build, ["t"], params={"token": SECRET, "url": url}, env={}).ok
    text = recorded(store)
    assert "https://deploy:[redacted]@example.test/" in text and SECRET not in text


def test_a_secret_default_is_redacted_like_a_supplied_secret() -> None:
    store = MemoryStateStore()

    def body(build: Any, ctx: Context) -> None:
        raise RuntimeError(f"token {build.token.value} expired")

    build = stored_build(store, {"token": parameter("t").secret().default(SECRET)}, body)
    result = execute(build, ["t"], env={})
    assert result.status == "failed"
    assert "token [redacted] expired" in recorded(store) and SECRET not in recorded(store)
    assert SECRET not in repr(build.__dict__["token"])  # nor in the declaration's repr


def test_a_parse_error_of_another_parameter_handed_the_secret_does_not_quote_it() -> None:
    class B(Build):
        token = parameter("t").secret()
        replicas = parameter("r").integer()

        @target
        def t(self, t):
            return t.executes(lambda: None)

    with pytest.raises(ParameterError) as info:
        execute(B, ["t"], params={"token": SECRET, "replicas": SECRET}, env={})
    assert "--replicas: expected an integer, got '[redacted]'" in str(info.value)
    assert SECRET not in everything_about(info.value)


# -- lock keys -------------------------------------------------------------------


def test_a_lock_key_built_from_a_secret_is_refused_when_the_build_loads() -> None:
    store = MemoryStateStore()

    class B(Build):
        token = parameter("t").secret()

        def state_store(self) -> StateStore:
            return store

        @target
        def t(self, t):
            return t.lock(lambda s: s.lock_key("deploy", self.token.value).with_ttl("1h")).executes(
                lambda: None
            )

    error = raises_before_anything(B, token="org/" + SECRET)  # sanitised inside the key
    assert "the lock key contains the value of a secret parameter" in str(error)
    assert SECRET not in everything_about(error)
    assert store.list_runs() == [] and store.list_locks() == []


def test_a_secret_lock_key_known_only_at_run_time_fails_the_target_without_quoting_it() -> None:
    store = MemoryStateStore()
    calls: list[int] = []

    class B(Build):
        token = parameter("t").secret()

        def state_store(self) -> StateStore:
            return store

        def _configure(self, s: Any) -> None:
            calls.append(1)
            if len(calls) == 1:
                raise LookupError("the key comes from the environment at run time")
            s.key(f"deploy.{self.token.value}").with_ttl("1h")

        @target
        def t(self, t):
            return t.lock(self._configure).executes(lambda: None)

    result = execute(B, ["t"], params={"token": SECRET}, env={})
    assert result.status == "failed" and len(calls) == 2
    assert "contains the value of a secret parameter" in (result.outcomes["t"].error or "")
    assert SECRET not in recorded(store) and store.list_locks() == []


# -- short secrets ------------------------------------------------------------------


def test_a_secret_shorter_than_eight_characters_is_refused_without_quoting_it() -> None:
    class B(Build):
        token = parameter("t").secret()
        pins = parameter("p").integer().array().secret()

        @target
        def t(self, t):
            return t.executes(lambda: None)

    with pytest.raises(ParameterError) as info:
        execute(B, ["t"], params={"token": "e"}, env={})
    assert "--token: a secret must be at least 8 characters long" in str(info.value)
    with pytest.raises(ParameterError, match="--pins: a secret must be at least 8"):
        execute(B, ["t"], params={"pins": "12345678,1234"}, env={})
    with pytest.raises(ParameterError, match="--pins: a secret must be at least 8"):
        execute(B, ["t"], params={"pins": "00000007"}, env={})  # its value spells "7"
    assert execute(B, ["t"], params={"token": "12345678", "pins": "12345678"}, env={}).ok


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        (lambda: parameter("b").boolean().secret(), "a boolean cannot be a secret"),
        (lambda: parameter("s").secret().default("short"), "a secret's default must be at least"),
        (lambda: parameter("s").integer().secret().default("x"), "the default is not a valid"),  # type: ignore[call-overload]
    ],
)
def test_secret_declarations_that_cannot_be_masked_fail_the_load(
    declare: Any, message: str
) -> None:
    Bad = type("Bad", (Build,), {"p": declare(), "t": target(lambda self, t: t)})
    with pytest.raises(BuildDefinitionError, match=message) as info:
        execute(Bad, ["t"], env={})
    assert "'x'" not in str(info.value)


def test_redactor_masks_numbers_in_json_but_not_booleans() -> None:
    redactor = Redactor(["12345678"])
    assert redactor.json({"n": 12345678, "f": 12345678.0, "b": True, "k": [112345678]}) == {
        "n": "[redacted]",
        "f": "[redacted].0",
        "b": True,
        "k": ["1[redacted]"],
    }


def test_a_failed_outcome_returned_to_the_caller_is_redacted() -> None:
    from zuke import Build, execute, parameter, target

    class Leaky(Build):
        token = parameter("token").secret()

        @target
        def deploy(self, t):
            def body() -> None:
                raise RuntimeError(f"auth failed for {self.token.value}")

            return t.executes(body)

    result = execute(Leaky, ["deploy"], params={"token": "s3cret-value-42"}, env={})
    outcome = result.outcomes["deploy"]
    assert outcome.status == "failed"
    assert "s3cret-value-42" not in (outcome.error or "") + (outcome.detail or "")
    assert "[redacted]" in (outcome.error or "")
