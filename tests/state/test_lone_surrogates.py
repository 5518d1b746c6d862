"""Lone surrogates: refused at every input, and a record that already holds one still prints.

``"\\ud800"`` is half of a UTF-16 pair, not a character: no UTF-8 encodes it.
``zuke resume --data``, a parameter, ``ctx.state.set``, an MCP tool's
arguments and a body sent to ``zuke serve`` each refuse it in one line (exit
2, a 400 over HTTP) before anything is stored. A record written by an older
zuke that holds one is still listed and shown (as its JSON escape), on the
filesystem store and on Postgres.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner
from tests.serve.support import TOKEN
from zuke._errors import UsageError
from zuke._serve import StateServer
from zuke._text import check_text, has_lone_surrogate
from zuke.state._protocol import Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.http import HttpStateStore
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import fresh, sample_record

LONE = "\ud800"

BUILD = """
    from zuke import Build, external_signal, parameter, target

    class Gated(Build):
        who = parameter("who")

        @target
        def plain(self, t):
            return t.executes(lambda: None)

        @target
        def meta(self, t):
            return t.executes(lambda ctx: ctx.state.set({"by": "\\ud800", "ok": 1}))

        @target
        def approve(self, t):
            return t.depends_on(self.plain).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("72h"))
"""


def test_the_check_finds_one_anywhere_in_a_value_keys_included() -> None:
    assert not has_lone_surrogate({"a": ["b", {"c": "Zoë ✓ 発行 \U0001f680"}]})
    for value in (LONE, ["x", LONE], {"k": {"deep": [LONE]}}, {LONE: 1}, ("\udfff",)):
        assert has_lone_surrogate(value), value
    with pytest.raises(UsageError, match="--data holds a lone surrogate"):
        check_text({"by": LONE}, what="--data")


def _one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zuke: "), err
    return lines[0]


def test_resume_data_with_one_is_refused_exit_2_and_nothing_is_stored(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    write_build(BUILD)
    assert cli("approve", "--state").code == 0
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (run,) = store.list_runs()
    before = store.get_run(run.id)
    result = cli("resume", run.id, "--signal", "approved", "--data", '{"by": "\\ud800"}')
    assert result.code == 2
    assert "--data holds a lone surrogate" in _one_line(result.err)
    after = store.get_run(run.id)
    assert before is not None and after is not None and after.version == before.version


def test_a_parameter_with_one_is_refused_exit_2(cli: CliRunner, write_build: BuildWriter) -> None:
    write_build(BUILD)
    result = cli("plain", "--who", "a\udcffb")  # what Python makes of a byte that is not UTF-8
    assert result.code == 2
    assert "--who" in _one_line(result.err) and "lone surrogate" in result.err


def test_ctx_state_set_with_one_fails_its_target_and_stores_none_of_the_patch(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    write_build(BUILD)
    result = cli("meta", "--state")
    assert result.code != 0
    assert "ctx.state.set in meta holds a lone surrogate" in result.text
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (run,) = store.list_runs()
    stored = store.get_run(run.id)
    assert stored is not None and stored.record.targets["meta"].meta == {}


def test_serve_answers_400_to_a_body_with_one_and_stores_nothing(tmp_path: Path) -> None:
    import httpx

    record = sample_record(fresh())
    with StateServer(db_path=tmp_path / "state.db", token=TOKEN) as server:
        with HttpStateStore(server.url, token=TOKEN) as store:
            created = store.create_run(record)
        assert isinstance(created, Written)
        headers = {"Authorization": f"Bearer {TOKEN}", "If-Match": created.version}
        body = b'{"updatedAt": "2026-01-02T03:04:05.000Z", "actor": "\\ud800"}'
        with httpx.Client(base_url=server.url) as client:
            answer = client.patch(f"/runs/{record.id}", content=body, headers=headers)
            assert answer.status_code == 400
            assert "lone surrogate" in answer.json()["error"]
            raw = json.dumps({**json.loads(client.get(f"/runs/{record.id}", headers=headers)
                                       .text), "actor": LONE})  # fmt: skip
            put = client.put(f"/runs/{record.id}", content=raw.encode(), headers=headers)
            assert put.status_code == 400
        with HttpStateStore(server.url, token=TOKEN) as store:
            stored = store.get_run(record.id)
    assert stored is not None and stored.record.actor == record.actor


def test_an_mcp_tool_call_with_one_is_refused_before_any_tool_runs(tmp_path: Path) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from tests.mcp.support import build_from, run, tools_for
    from zuke.mcp.server import build_server

    build = build_from(tmp_path, BUILD)
    server = build_server(tools_for(build, tmp_path))
    with pytest.raises(ToolError, match="lone surrogate"):
        run(server.call_tool("run_target", {"targets": ["plain"], "params": {"who": LONE}}))
    assert not (tmp_path / "state").exists()  # no run was recorded


def _holding_one(store: FileSystemStateStore | PostgresStateStore) -> str:
    record = replace(sample_record(fresh()), actor=f"ev{LONE}il", build=f"B{LONE}x")
    assert isinstance(store.create_run(record), Written)
    return record.id


@pytest.mark.parametrize("kind", ["filesystem", "postgres"])
def test_a_record_that_holds_one_still_lists_and_shows(
    cli: CliRunner, tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    if kind == "filesystem":
        env = {"ZUKE_STATE_DIR": str(tmp_path / "runs")}
        run_id = _holding_one(FileSystemStateStore(tmp_path / "runs"))
    else:
        url = request.getfixturevalue("pg_url")
        env = {"ZUKE_STATE": url}
        pg = PostgresStateStore(url)
        run_id = _holding_one(pg)
        pg.close()
    shown = cli("runs", "show", run_id, "--json", env=env)
    assert shown.code == 0, shown.text
    assert json.loads(shown.out)["actor"] == f"ev{LONE}il"  # its JSON escape, read back
    listed = cli("runs", "list", "--json", env=env)
    assert listed.code == 0, listed.text
    assert [r["build"] for r in json.loads(listed.out)] == [f"B{LONE}x"]
    table = cli("runs", "list", env=env)
    assert table.code == 0 and "ev\\ud800il" in table.out
