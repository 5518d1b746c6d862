from __future__ import annotations

from collections.abc import Mapping

import pytest

from tests.engine.builds import chain_build
from zuke import Build, BuildDefinitionError, GraphError, Target, UsageError, execute, target


class Recorder:
    def __init__(self) -> None:
        self.order: list[str] = []

    def body(self, name: str):
        return lambda: self.order.append(name)


def test_a_cycle_is_reported_before_any_target_runs_naming_the_cycle() -> None:
    ran: list[str] = []

    class Cyclic(Build):
        @target
        def a(self, t):
            return t.depends_on(self.c).executes(lambda: ran.append("a"))

        @target
        def b(self, t):
            return t.depends_on(self.a).executes(lambda: ran.append("b"))

        @target
        def c(self, t):
            return t.depends_on(self.b).executes(lambda: ran.append("c"))

        @target
        def free(self, t):
            return t.executes(lambda: ran.append("free"))

    with pytest.raises(GraphError) as info:
        execute(Cyclic, ["free"], env={})
    assert str(info.value) == "Dependency cycle detected: a → c → b → a"
    assert ran == []


def test_an_unknown_reference_is_reported_naming_both_targets() -> None:
    class Other(Build):
        @target
        def elsewhere(self, t):
            return t

    class Broken(Build):
        @target
        def a(self, t):
            return t.depends_on(Other.elsewhere).executes(lambda: None)

    with pytest.raises(GraphError, match="target 'a' depends on unknown target 'elsewhere'"):
        execute(Broken, ["a"], env={})


def test_a_string_dependency_is_rejected_with_the_handle_to_use() -> None:
    class Strings(Build):
        @target
        def a(self, t):
            return t.depends_on("b")

        @target
        def b(self, t):
            return t

    with pytest.raises(BuildDefinitionError, match=r"pass a target handle such as self\.b"):
        execute(Strings, ["a"], env={})


def test_forward_references_resolve() -> None:
    rec = Recorder()

    class Forward(Build):
        @target
        def deploy(self, t):
            return t.depends_on(self.build_it).executes(rec.body("deploy"))

        @target
        def build_it(self, t):
            return t.executes(rec.body("build_it"))

    assert execute(Forward, ["deploy"], env={}).ok
    assert rec.order == ["build_it", "deploy"]


def test_only_requested_targets_and_their_dependencies_run() -> None:
    rec = Recorder()

    class Some(Build):
        @target
        def a(self, t):
            return t.executes(rec.body("a"))

        @target
        def b(self, t):
            return t.depends_on(self.a).executes(rec.body("b"))

        @target
        def unrelated(self, t):
            return t.executes(rec.body("unrelated"))

    result = execute(Some, ["b"], env={})
    assert rec.order == ["a", "b"] and list(result.outcomes) == ["a", "b"]


def test_a_diamond_runs_each_target_once_dependencies_first() -> None:
    rec = Recorder()

    class Diamond(Build):
        @target
        def base(self, t):
            return t.executes(rec.body("base"))

        @target
        def left(self, t):
            return t.depends_on(self.base).executes(rec.body("left"))

        @target
        def right(self, t):
            return t.depends_on(self.base).executes(rec.body("right"))

        @target
        def top(self, t):
            return t.depends_on(self.left, self.right).executes(rec.body("top"))

    execute(Diamond, ["top"], env={})
    assert rec.order == ["base", "left", "right", "top"]


def test_extra_edges_order_targets_without_pulling_them_in() -> None:
    rec = Recorder()

    class Ordered(Build):
        def extra_edges(self) -> list[tuple[Target, Target]]:
            return [(self.second, self.first), (self.absent, self.first)]

        @target
        def first(self, t):
            return t.executes(rec.body("first"))

        @target
        def second(self, t):
            return t.executes(rec.body("second"))

        @target
        def absent(self, t):
            return t.executes(rec.body("absent"))

    execute(Ordered, ["first", "second"], env={})
    assert rec.order == ["second", "first"]


def test_order_with_is_awaited_and_merged_with_extra_edges() -> None:
    rec = Recorder()

    class Lazy(Build):
        async def order_with(self, targets: Mapping[str, Target]) -> list[tuple[Target, Target]]:
            return [(targets["c"], targets["b"])]

        def extra_edges(self) -> list[tuple[Target, Target]]:
            return [(self.b, self.a)]

        @target
        def a(self, t):
            return t.executes(rec.body("a"))

        @target
        def b(self, t):
            return t.executes(rec.body("b"))

        @target
        def c(self, t):
            return t.executes(rec.body("c"))

    execute(Lazy, ["a", "b", "c"], env={})
    assert rec.order == ["c", "b", "a"]


def test_a_cycle_through_ordering_edges_is_reported() -> None:
    class Loop(Build):
        def extra_edges(self) -> list[tuple[Target, Target]]:
            return [(self.b, self.a)]

        @target
        def a(self, t):
            return t.executes(lambda: None)

        @target
        def b(self, t):
            return t.depends_on(self.a).executes(lambda: None)

    with pytest.raises(GraphError, match="Dependency cycle detected"):
        execute(Loop, ["b"], env={})


def test_a_failing_order_with_is_a_definition_error() -> None:
    class Failing(Build):
        async def order_with(self, targets: Mapping[str, Target]) -> list[tuple[Target, Target]]:
            raise RuntimeError("graph file missing")

        @target
        def a(self, t):
            return t.executes(lambda: None)

    with pytest.raises(BuildDefinitionError, match="Failed to resolve ordering edges: graph file"):
        execute(Failing, ["a"], env={})


def test_an_unknown_target_is_a_usage_error_with_a_suggestion() -> None:
    class Named(Build):
        @target
        def deploy(self, t):
            return t.executes(lambda: None)

    with pytest.raises(UsageError, match=r'Unknown target: deplyo\. Did you mean "deploy"\?'):
        execute(Named, ["deplyo"], env={})


def test_a_long_chain_plans_without_recursion_limits() -> None:
    result = execute(chain_build(3000), ["t2999"], env={})
    assert result.ok and len(result.outcomes) == 3000


def test_a_target_named_like_a_command_is_refused() -> None:
    class Clash(Build):
        @target
        def graph(self, t):
            return t

    with pytest.raises(BuildDefinitionError, match="has the name of the command `zuke graph`"):
        execute(Clash, ["graph"], env={})


def test_one_walk_checks_the_graph_and_orders_it() -> None:
    """``check_acyclic`` returns the topological order it walked (predecessors first, the
    given order otherwise), so planning walks the graph once (issue 28 §1)."""
    from zuke._engine.plan import check_acyclic

    edges = {"c": ["a", "b"], "b": ["a"], "d": ["b"], "x": []}
    assert check_acyclic(edges, ["c", "x", "d"]) == ["a", "b", "c", "x", "d"]
    with pytest.raises(GraphError, match="Dependency cycle detected: a → b → a"):
        check_acyclic({"a": ["b"], "b": ["a"]}, ["a"])
