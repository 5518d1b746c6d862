"""The hooks a sweep runs after itself (``zuke.after_sweep`` entry points): called with the
sweep's store, the worst exit code wins, and a hook that cannot be loaded is one line."""

from __future__ import annotations

import io
from collections.abc import Mapping
from importlib.metadata import EntryPoint
from typing import Any, TextIO

import pytest

from zuke.cli import after_sweep
from zuke.state.memory import MemoryStateStore

CALLS: list[tuple[Any, str]] = []


def hook_ok(store: Any, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    CALLS.append((store, env.get("X", "")))
    out.write("ok hook\n")
    return 0


def hook_refused(store: Any, env: Mapping[str, str], out: TextIO, err: TextIO) -> int:
    err.write("zuke: refused\n")
    return 2


def _points(monkeypatch: pytest.MonkeyPatch, *values: str) -> None:
    found = [EntryPoint(f"h{i}", v, after_sweep.GROUP) for i, v in enumerate(values)]
    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: found)


def test_each_hook_gets_the_sweeps_store_and_the_worst_code_wins(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _points(monkeypatch, f"{__name__}:hook_ok", f"{__name__}:hook_refused")
    store, out, err = MemoryStateStore(), io.StringIO(), io.StringIO()
    CALLS.clear()
    assert after_sweep.run_hooks(store, {"X": "1"}, out, err) == 2
    assert [(store, "1")] == CALLS and out.getvalue() == "ok hook\n"
    assert err.getvalue() == "zuke: refused\n"


def test_a_hook_that_cannot_be_loaded_is_one_line_and_exit_1(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _points(monkeypatch, "no_such_module_zz:hook")
    err = io.StringIO()
    assert after_sweep.run_hooks(MemoryStateStore(), {}, io.StringIO(), err) == 1
    [line] = err.getvalue().splitlines()
    assert line.startswith("zuke: the after-sweep hook h0 (no_such_module_zz:hook) could not")


def test_zuke_gh_registers_the_dashboard_hook() -> None:
    from importlib.metadata import entry_points

    names = {p.name: p.value for p in entry_points(group=after_sweep.GROUP)}
    assert names["github-dashboard"] == "zuke_gh._dashboard_hook:after_sweep"


def test_the_dashboard_hook_does_nothing_without_its_setting() -> None:
    from zuke_gh._dashboard_hook import after_sweep as hook

    out, err = io.StringIO(), io.StringIO()
    assert hook(MemoryStateStore(), {"GITHUB_REPOSITORY": "a/b"}, out, err) == 0
    assert out.getvalue() == err.getvalue() == ""
