"""``run.stateless``: the run decides it has no store before importing the durable side —
and decides exactly as ``open_run`` would (a run it calls stateless would have had no
store; one that would have had a store is never run without)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from pathlib import Path

import pytest

from zuke import Build, target
from zuke._clock import SYSTEM_CLOCK
from zuke._engine.context import RunState
from zuke._engine.durable_open import open_run
from zuke._engine.plan import Plan, make_plan
from zuke._engine.run import load, stateless
from zuke._errors import StateError
from zuke._redact import Redactor
from zuke.state.memory import MemoryStateStore


class Plain(Build):
    @target
    def compile(self, t):
        return t.executes(lambda: None)


class Locked(Build):
    @target
    def deploy(self, t):
        return t.lock(lambda s: s.lock_key("env", "sit").with_ttl("1m")).executes(lambda: None)


class Fanned(Build):
    @target
    def batch(self, t):
        return t.for_each(lambda: ["a"], lambda item, index: {"s": target().executes(print)})


def _plan(build: type[Build]) -> Plan:
    graph = load(build, {}, {}).graph
    return make_plan(graph, list(graph.specs)[-1:])


async def _opened(plan: Plan, env: Mapping[str, str], override: object, required: bool,
                  cwd: Path) -> bool | None:  # fmt: skip
    """Whether ``open_run`` gives the run a store (``None``: it refuses the run)."""
    state = RunState(run_id="r-1", actor="tester", redactor=Redactor())
    try:
        durable = await open_run(
            build_name="B", override=override, deadline=None, plan=plan,  # type: ignore[arg-type]
            roots=list(plan.order[-1:]), params={}, state=state, env=env,
            clock=SYSTEM_CLOCK, required=required,
            cwd=cwd, warn=lambda message: None,
        )  # fmt: skip
    except StateError:
        return None
    if durable is None:
        return False
    await durable.close("succeeded")
    return True


@pytest.mark.parametrize(
    ("build", "env_name", "with_override", "required"),
    list(
        itertools.product(
            [Plain, Locked, Fanned], ["none", "off", "dir", "off+dir"], [False, True], [False, True]
        )
    ),
)
def test_stateless_agrees_with_the_durable_run(
    build: type[Build], env_name: str, with_override: bool, required: bool, tmp_path: Path
) -> None:
    env = {
        "none": {},
        "off": {"ZUKE_STATE": "off"},
        "dir": {"ZUKE_STATE_DIR": "state"},
        "off+dir": {"ZUKE_STATE": "off", "ZUKE_STATE_DIR": "state"},
    }[env_name]
    override = MemoryStateStore() if with_override else None
    plan = _plan(build)
    has_store = asyncio.run(_opened(plan, env, override, required, tmp_path))
    decided = stateless(override, env, plan, required=required)
    if has_store is None:  # refused (a store is needed under ZUKE_STATE=off): open says so
        assert not decided
    else:
        assert decided == (not has_store)


@pytest.mark.parametrize(
    "env",
    [
        {"ZUKE_STATE_URL": "https://state.example"},
        {"ZUKE_STATE": "postgresql://db/zuke"},
        {"ZUKE_STATE": "github://o/r"},
    ],
)
def test_a_store_named_in_the_environment_is_left_to_the_durable_run(
    env: dict[str, str],
) -> None:
    assert not stateless(None, env, _plan(Plain), required=False)
