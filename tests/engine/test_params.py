from __future__ import annotations

import pytest

from zuke import Build, ParameterError, execute, parameter, target
from zuke._param_parse import parse_value
from zuke._params import resolve


class Kinds(Build):
    name = parameter("a name")
    must = parameter("required").required()
    ratio = parameter("a number").number()
    count = parameter("an integer").integer().default(3)
    flag = parameter("a switch").boolean()
    env = parameter("where").options("sit", "prod")
    tags = parameter("tags").array()
    workers = parameter("worker ids").integer().array()
    services = parameter("services").options("api", "web").array()
    token = parameter("a secret").secret()
    long_name = parameter("dashes")

    seen: dict[str, object] = {}

    @target
    def show(self, t):
        def body() -> None:
            for p in (
                "name",
                "must",
                "ratio",
                "count",
                "flag",
                "env",
                "tags",
                "workers",
                "services",
                "token",
                "long_name",
            ):
                Kinds.seen[p] = getattr(self, p).value

        return t.executes(body)


def run_with(
    params: dict[str, str | list[str]], env: dict[str, str] | None = None
) -> dict[str, object]:
    Kinds.seen = {}
    result = execute(Kinds, ["show"], params=params, env=env or {})
    assert result.ok, result.failures
    return dict(Kinds.seen)


def test_every_kind_parses_to_its_python_type() -> None:
    seen = run_with(
        {
            "must": "x",
            "ratio": "2.5",
            "flag": "yes",
            "env": "prod",
            "tags": ["latest,canary", "beta"],
            "workers": "1, 2,,3",
            "services": "api,web",
            "token": "s3cret-value",
            "long_name": "v",
        }
    )
    assert seen == {
        "name": None,
        "must": "x",
        "ratio": 2.5,
        "count": 3,
        "flag": True,
        "env": "prod",
        "tags": ["latest", "canary", "beta"],
        "workers": [1, 2, 3],
        "services": ["api", "web"],
        "token": "s3cret-value",
        "long_name": "v",
    }


def test_values_come_from_environment_variables_when_no_flag_is_given() -> None:
    seen = run_with({}, env={"MUST": "from-env", "TAGS": "a,b", "LONG_NAME": "ln", "COUNT": "7"})
    assert (seen["must"], seen["tags"], seen["long_name"], seen["count"]) == (
        "from-env",
        ["a", "b"],
        "ln",
        7,
    )


def test_flag_wins_over_environment_variable() -> None:
    assert run_with({"must": "flag"}, env={"MUST": "env"})["must"] == "flag"


def test_unsupplied_list_is_empty_and_unsupplied_boolean_is_false() -> None:
    seen = run_with({"must": "x"})
    assert seen["tags"] == [] and seen["flag"] is False


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"ratio": "abc"}, "--ratio: expected a number, got 'abc'"),
        ({"ratio": "inf"}, "--ratio: expected a finite number"),
        ({"count": "3.5"}, "--count: expected an integer, got '3.5'"),
        ({"env": "qa"}, "--env: expected one of sit, prod, got 'qa'"),
        ({"services": "api,db"}, "--services: expected one of api, web, got 'db'"),
        ({"workers": "1,x"}, "--workers: expected an integer, got 'x'"),
        ({"flag": "maybe"}, "--flag: expected true/false"),
    ],
)
def test_bad_values_are_rejected_naming_parameter_value_and_expectation(
    params: dict[str, str], expected: str
) -> None:
    with pytest.raises(ParameterError) as info:
        execute(Kinds, ["show"], params={"must": "x", **params}, env={})
    assert expected in str(info.value)


def test_missing_and_blank_required_values_are_both_reported() -> None:
    with pytest.raises(ParameterError) as info:
        execute(Kinds, ["show"], params={}, env={})
    assert "--must is required (or set MUST)" in str(info.value)
    with pytest.raises(ParameterError) as info:
        execute(Kinds, ["show"], params={"must": "   "}, env={})
    assert "--must: a value is required, got a blank one" in str(info.value)


def test_all_parameter_errors_are_reported_together() -> None:
    with pytest.raises(ParameterError) as info:
        execute(Kinds, ["show"], params={"ratio": "x", "env": "qa"}, env={})
    message = str(info.value)
    assert "--must is required" in message and "--ratio" in message and "--env" in message


def test_a_secret_value_never_appears_in_a_parse_error() -> None:
    class Secretive(Build):
        pin = parameter("pin").secret().integer()

        @target
        def t(self, t):
            return t.executes(lambda: None)

    with pytest.raises(ParameterError) as info:
        execute(Secretive, ["t"], params={"pin": "hunter2"}, env={})
    assert "hunter2" not in str(info.value)
    assert "(hidden)" in str(info.value)


def test_required_array_rejects_an_empty_list() -> None:
    class Needs(Build):
        repos = parameter("repos").required().array()

        @target
        def t(self, t):
            return t.executes(lambda: None)

    with pytest.raises(ParameterError, match="--repos is required"):
        execute(Needs, ["t"], params={"repos": " , "}, env={})


def test_reading_a_value_before_resolution_is_a_clear_error() -> None:
    bound = Kinds.__dict__["name"].__get__(Kinds(), Kinds)
    with pytest.raises(ParameterError, match="read before it was resolved"):
        _ = bound.value


def test_parse_value_drops_blank_array_entries() -> None:
    assert parse_value(parameter().array(), [" a , ,b", ""]) == ["a", "b"]


def test_lenient_resolution_leaves_missing_required_values_unset() -> None:
    resolution = resolve([Kinds.__dict__["must"]], {}, {}, lenient=True)
    assert resolution.errors == [] and "must" not in resolution.values


@pytest.mark.parametrize(
    ("declare", "message"),
    [
        # The type checker rejects these too; the runtime check is for untyped build files.
        (lambda: parameter("n").integer().default("3"), "default '3' is not a valid integer"),  # type: ignore[call-overload]
        (lambda: parameter("e").options("a", "b").default("zzz"), "default 'zzz' is not a valid"),
        (lambda: parameter("f").boolean().default("yes"), "default 'yes' is not a valid boolean"),  # type: ignore[arg-type]
        (lambda: parameter("l").array().default("a,b"), "default 'a,b' is not a list"),  # type: ignore[arg-type]
    ],
)
def test_a_default_that_does_not_fit_is_a_definition_error(declare, message) -> None:
    from zuke import BuildDefinitionError

    Bad = type("Bad", (Build,), {"p": declare(), "t": target(lambda self, t: t)})
    with pytest.raises(BuildDefinitionError, match=message):
        execute(Bad, ["t"], env={})


def test_options_apply_to_numbers_too() -> None:
    class Pick(Build):
        size = parameter("size").integer().options("1", "2")

        @target
        def t(self, t):
            return t

    with pytest.raises(ParameterError, match="--size: expected one of 1, 2, got '7'"):
        execute(Pick, ["t"], params={"size": "7"}, env={})
    assert execute(Pick, ["t"], params={"size": "2"}, env={}).ok


def test_a_parameter_named_like_a_builtin_flag_is_refused() -> None:
    from zuke import BuildDefinitionError

    class Clash(Build):
        parallel = parameter("oops")

        @target
        def t(self, t):
            return t

    with pytest.raises(BuildDefinitionError, match="collides with the built-in flag --parallel"):
        execute(Clash, ["t"], env={})


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({"ratio": "٣"}, "--ratio: expected a number, got '٣'"),
        ({"ratio": "1_000.5"}, "--ratio: expected a number, got '1_000.5'"),
        ({"ratio": ".5"}, "--ratio: expected a number, got '.5'"),
        ({"count": "٣"}, "--count: expected an integer, got '٣'"),
        ({"count": "1_000"}, "--count: expected an integer, got '1_000'"),
        ({"count": "１２"}, "--count: expected an integer, got '１２'"),
        ({"ratio": "1e999"}, "--ratio: expected a finite number, got '1e999'"),
        ({"ratio": "-Infinity"}, "--ratio: expected a finite number, got '-Infinity'"),
    ],
)
def test_numbers_use_one_strict_ascii_grammar(params: dict[str, str], expected: str) -> None:
    with pytest.raises(ParameterError) as info:
        execute(Kinds, ["show"], params={"must": "x", **params}, env={})
    assert expected in str(info.value)


@pytest.mark.parametrize(
    ("params", "key", "value"),
    [
        ({"ratio": " -2.5e1 "}, "ratio", -25.0),
        ({"count": "+7"}, "count", 7),
        ({"ratio": "10"}, "ratio", 10.0),
    ],
)
def test_the_strict_grammar_still_takes_signs_fractions_and_exponents(
    params: dict[str, str], key: str, value: object
) -> None:
    assert run_with({"must": "x", **params})[key] == value


def test_options_validate_exactly_the_value_the_body_gets() -> None:
    with pytest.raises(ParameterError, match="--env: expected one of sit, prod, got ' sit'"):
        execute(Kinds, ["show"], params={"must": "x", "env": " sit"}, env={})
    with pytest.raises(ParameterError, match="--env: expected one of sit, prod, got 'sit '"):
        execute(Kinds, ["show"], params={"must": "x", "env": "sit "}, env={})
    assert run_with({"must": "x", "env": "sit"})["env"] == "sit"


def test_numeric_options_compare_the_parsed_number() -> None:
    class Pick(Build):
        size = parameter("size").integer().options("1", "2")
        seen: list[object] = []

        @target
        def t(self, t):
            return t.executes(lambda: Pick.seen.append(self.size.value))

    assert execute(Pick, ["t"], params={"size": " 02 "}, env={}).ok
    assert Pick.seen == [2]
