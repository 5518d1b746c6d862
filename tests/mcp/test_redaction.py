"""What a ``zuke mcp`` server masks: the secrets it accepted, never a value it refused.

A secret refused as too short cannot be masked without garbling output and, by
doing so, revealing it; over MCP it once entered the server's redactor, so the
refusal read "a [redacted] must be …" and every later result of that server
masked the same word, JSON keys included, until it restarted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mcp.support import SECRET, build_from, events, run, store_of, tools_for
from zuke._build import Build
from zuke.mcp.tools import ToolFailure

ARRAY_BUILD = """
from zuke import Build, parameter, target

class Release(Build):
    keys = parameter("the deploy keys").array().secret()

    @target
    def deploy(self, t):
        return t.description("Deploy the release now.").executes(lambda ctx: None)
"""


@pytest.mark.parametrize("refused", ["secret", "status", "waiting", "promote"])
def test_a_secret_refused_as_too_short_is_masked_neither_in_its_refusal_nor_later(
    build: type[Build], tmp_path: Path, refused: str
) -> None:
    tools = tools_for(build, tmp_path)
    suspended = run(tools.run_target(["promote"]))["runId"]
    with pytest.raises(ToolFailure) as caught:
        run(tools.run_target(["deploy"], {"token": refused}))
    message = str(caught.value)
    assert "--token: a secret must be at least 8 characters long (a shorter one cannot be" in (
        message
    )
    assert "[redacted]" not in message
    shown = run(tools.show_run(suspended))
    assert shown["status"] == "suspended"  # the key and the value alike
    assert shown["targets"]["approve"]["status"] == "waiting"
    assert shown["rootTarget"] == "promote"
    assert "[redacted]" not in json.dumps(shown)
    listed = run(tools.list_runs(status="suspended"))["runs"]
    assert [(r["id"], r["status"]) for r in listed] == [(suspended, "suspended")]
    assert "[redacted]" not in json.dumps(run(tools.list_targets()))


def test_an_array_secret_with_one_short_item_is_refused_whole_and_masks_nothing(
    tmp_path: Path,
) -> None:
    tools = tools_for(build_from(tmp_path, ARRAY_BUILD), tmp_path)
    with pytest.raises(ToolFailure, match="--keys: a secret must be at least 8 characters"):
        run(tools.run_target(["deploy"], {"keys": ["Deploy the release now.", "xy"]}))
    (deploy,) = run(tools.list_targets())["targets"]
    assert deploy["description"] == "Deploy the release now."


def test_an_accepted_secret_is_masked_in_later_calls_too(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path)
    failed = run(tools.run_target(["broken"], {"token": "given-secret-3"}))
    assert "refused token [redacted]" in failed["outcomes"]["broken"]["error"]
    # The same value handed to a parameter that is not secret, in a later call.
    later = run(tools.run_target(["deploy"], {"version": "given-secret-3"}))
    (event,) = events(tmp_path, later["runId"])
    assert event.args["params"] == '{"version": ["[redacted]"]}'


def test_a_call_whose_arguments_hold_a_secret_is_audited_with_it_masked(
    build: type[Build], tmp_path: Path
) -> None:
    tools = tools_for(build, tmp_path)  # the server's environment supplies SECRET
    run_id = run(tools.run_target(["promote"]))["runId"]
    with pytest.raises(ToolFailure) as caught:
        run(tools.cancel_run(run_id, SECRET))
    assert SECRET not in str(caught.value) and "[redacted]" in str(caught.value)
    last = events(tmp_path, run_id)[-1]
    assert (last.tool, last.outcome) == ("mcp:cancel_run", "error")
    assert last.args == {"run_id": run_id, "wait": "[redacted]"}
    assert last.detail == str(caught.value)
    found = store_of(tmp_path).get_run(run_id)
    assert found is not None and found.record.status == "suspended"
