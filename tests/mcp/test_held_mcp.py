"""MCP ``show_run`` of a run that keeps a lock across its gate (``held_until``): it says
which lock the run keeps and until which target, never the lock's token (it renews and
releases the claim)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.mcp.support import run
from tests.runs.test_held_until import KEY, harness, parked
from zuke.cli.mcp_cmd import describe
from zuke.mcp.tools import BuildTools
from zuke.state.memory import MemoryStateStore


def test_show_run_names_the_kept_lock_never_its_token(tmp_path: Path) -> None:
    store = MemoryStateStore()
    calls: list[Any] = []
    h = harness(store, calls)
    run_id = parked(h)
    token = h.record(run_id).locks[KEY]
    tools = BuildTools(build=h.build, env={}, actor="agent", describe=describe)
    shown = run(tools.show_run(run_id))
    assert token not in json.dumps(shown)
    assert shown["locks"] == {KEY: "(held)"}
    assert shown["heldLocks"][KEY]["until"] == "promote"
