"""``t.environment(name, url=)`` and ``ctx.environment_url``: checked at definition, recorded
on the target's row (issue 26 §1), read back by older and newer readers alike."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.engine.fan_out_support import fan_build, only, run
from zuke import Build, BuildDefinitionError, target
from zuke._engine.run import RunOptions, execute_async
from zuke._target import TargetBuilder
from zuke.cli.listing import graph_text
from zuke.cli.runs_view import record_text
from zuke.state.memory import MemoryStateStore
from zuke.state.records import TargetRecord
from zuke.state.wire import parse_record, record_to_json


def release(store: MemoryStateStore, *, url: Any = "https://staging.example.com",
            body: Any = None) -> type[Build]:  # fmt: skip
    """``build`` → ``staging`` (environment ``staging`` at ``url``) → ``production``."""

    def build(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None)

    def staging(self: Build, t: TargetBuilder) -> TargetBuilder:
        return (
            t.depends_on(self.build)  # type: ignore[attr-defined]
            .environment("staging", url=url)
            .executes(body or (lambda: None))
        )

    def production(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.staging).environment("production").executes(lambda: None)  # type: ignore[attr-defined]

    namespace = {
        "build": target(build), "staging": target(staging), "production": target(production),
        "state_store": lambda self: store,
    }  # fmt: skip
    return type("Release", (Build,), namespace)


def go(build: type[Build], *targets: str) -> Any:
    return asyncio.run(execute_async(build, RunOptions(targets=list(targets), env={})))


def test_the_environment_and_its_url_are_on_the_targets_row() -> None:
    store = MemoryStateStore()
    result = go(release(store), "production")
    assert result.status == "succeeded"
    rows = only(store).targets
    assert (rows["staging"].environment, rows["staging"].environment_url) == (
        "staging", "https://staging.example.com",
    )  # fmt: skip
    assert (rows["production"].environment, rows["production"].environment_url) == (
        "production", None,
    )  # fmt: skip
    assert rows["build"].environment is None


def test_the_environment_is_in_the_first_record_before_its_target_starts() -> None:
    """A reporter shows a deployment ``queued`` at the run's creation: the row names it then."""
    store = MemoryStateStore()
    seen: list[TargetRecord] = []

    def peek() -> None:
        seen.append(only(store).targets["production"])

    cls = release(store, body=peek)
    go(cls, "production")
    assert seen[0].status == "pending"
    assert seen[0].environment == "production"


def test_a_url_function_of_ctx_is_called_as_the_target_starts() -> None:
    store = MemoryStateStore()
    go(release(store, url=lambda ctx: f"https://{ctx.target}.example.com/{ctx.run_id[:4]}"),
       "staging")  # fmt: skip
    record = only(store)
    assert record.targets["staging"].environment_url == (
        f"https://staging.example.com/{record.id[:4]}"
    )


def test_the_body_may_set_the_url_once_it_knows_it() -> None:
    store = MemoryStateStore()

    def body(ctx: Any) -> None:
        assert ctx.environment_url == "https://staging.example.com"
        ctx.environment_url = "https://pr-7.preview.example.com"

    go(release(store, body=body), "staging")
    assert only(store).targets["staging"].environment_url == "https://pr-7.preview.example.com"


def test_a_url_the_body_sets_that_is_not_http_fails_the_target_in_one_line() -> None:
    store = MemoryStateStore()

    def body(ctx: Any) -> None:
        ctx.environment_url = "javascript:alert(1)"

    result = go(release(store, body=body), "staging")
    assert result.status == "failed"
    row = only(store).targets["staging"]
    assert row.environment_url == "https://staging.example.com"  # the bad one never stored
    assert "absolute http(s) URL" in (row.error or "")


def test_a_url_function_that_raises_or_returns_no_url_fails_the_target() -> None:
    store = MemoryStateStore()
    result = go(release(store, url=lambda ctx: "ftp://nope"), "production")
    assert result.outcomes["staging"].status == "failed"
    assert result.outcomes["production"].status == "skipped"
    assert "absolute http(s) URL" in (only(store).targets["staging"].error or "")

    store = MemoryStateStore()
    result = go(release(store, url=lambda ctx: 1 / 0), "staging")
    assert "ZeroDivisionError" in (only(store).targets["staging"].error or "")


def test_a_secret_in_a_url_is_masked_before_it_is_recorded() -> None:
    from zuke import parameter

    store = MemoryStateStore()
    base = release(store, url=lambda ctx: "https://x.example.com/?t=" + "hunter2-secret-value")
    cls = type("Secretive", (base,), {"token": parameter("t").secret()})
    asyncio.run(execute_async(cls, RunOptions(
        targets=["staging"], params={"token": ["hunter2-secret-value"]}, env={},
    )))  # fmt: skip
    url = only(store).targets["staging"].environment_url or ""
    assert "hunter2" not in url and url.startswith("https://x.example.com/")


@pytest.mark.parametrize(
    ("name", "url", "says"),
    [
        ("", None, "non-empty string"),
        ("x" * 256, None, "GitHub allows 255"),
        ("prod\nuction", None, "control characters"),
        ('a"b', None, "kept out of graphs"),
        ("staging", "staging.example.com", "absolute http(s) URL"),
        ("staging", 42, "must be a string"),
    ],
)
def test_a_bad_name_or_url_is_a_definition_error_naming_the_target(
    name: Any, url: Any, says: str
) -> None:
    with pytest.raises(BuildDefinitionError) as caught:
        TargetBuilder("deploy").environment(name, url=url)
    assert "target 'deploy'.environment()" in str(caught.value)
    assert says in str(caught.value)


def test_each_fan_out_item_names_its_own_environment() -> None:
    store = MemoryStateStore()

    def stages(region: Any, index: int) -> dict[str, TargetBuilder]:
        return {"deploy": target().environment(
            f"production-{region}", url=f"https://{region}.example.com",
        ).executes(lambda: None)}  # fmt: skip

    run(fan_build(store, stages), repos=["eu-west,us-east"])
    rows = only(store).targets
    assert rows["batch[eu-west].deploy"].environment == "production-eu-west"
    assert rows["batch[us-east].deploy"].environment_url == "https://us-east.example.com"


def test_the_wire_form_names_them_and_an_older_record_reads_without_them() -> None:
    store = MemoryStateStore()
    go(release(store), "staging")
    record = only(store)
    wire = record_to_json(record)
    assert wire["targets"]["staging"]["environment"] == "staging"
    assert wire["targets"]["staging"]["environmentUrl"] == "https://staging.example.com"
    assert "environment" not in wire["targets"]["build"]
    assert parse_record(json.loads(json.dumps(wire))) == record
    for row in wire["targets"].values():  # a record written before step 16
        row.pop("environment", None)
        row.pop("environmentUrl", None)
    older = parse_record(wire)
    assert older.targets["staging"].environment is None
    assert older.targets["staging"].extra == {}


def test_runs_show_and_the_graph_show_the_environment() -> None:
    from zuke._build import define_targets
    from zuke._engine.plan import BuildGraph

    store = MemoryStateStore()
    cls = release(store)
    go(cls, "staging")
    text = record_text(only(store))
    assert "environment staging  https://staging.example.com" in text
    graph = BuildGraph.from_builders(define_targets(cls()))
    assert "staging [env: staging] → build" in graph_text(graph, "text")
    described = json.loads(graph_text(graph, "json"))["targets"]
    assert described[1] == {
        "name": "staging", "description": "", "dependsOn": ["build"],
        "environment": "staging", "environmentUrl": "https://staging.example.com",
    }  # fmt: skip
    assert '["staging [env: staging]"]' in graph_text(graph, "mermaid")


def test_mcp_shows_the_environment_in_the_run_and_the_graph() -> None:
    """MCP's run tool answers ``shown_record_json`` and its build listing ``describe_targets``."""
    from zuke._build import define_targets
    from zuke._engine.plan import BuildGraph
    from zuke.cli.listing import describe_targets
    from zuke.state.wire import shown_record_json

    store = MemoryStateStore()
    cls = release(store)
    go(cls, "staging")
    shown = shown_record_json(only(store))
    assert shown["targets"]["staging"]["environment"] == "staging"
    assert shown["targets"]["staging"]["environmentUrl"] == "https://staging.example.com"
    graph = BuildGraph.from_builders(define_targets(cls()))
    assert {"name": "production", "description": "", "dependsOn": ["staging"],
            "environment": "production"} in describe_targets(graph)  # fmt: skip
