"""``zuke mcp`` as an MCP client sees it: the SDK's own stdio client and a real server process.

Every wait is bounded: the whole session runs under ``anyio.fail_after``, and
the separate owner process is polled with a deadline.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.e2e.support import ZUKE, clean_env, finish, kill, spawn, wait_until, write_build
from tests.mcp.support import BUILD, COMPENSATED_BUILD, SECRET
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunRecord

if TYPE_CHECKING:
    from mcp import ClientSession

pytestmark = pytest.mark.e2e
SESSION_S = 60
ALL_TOOLS = [
    "list_targets",
    "list_runs",
    "show_run",
    "run_target",
    "resume_run",
    "resume_check",
    "cancel_run",
]


@asynccontextmanager
async def session(
    workdir: Path, *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """A client session with ``zuke mcp FLAGS`` started in ``workdir``; stderr to a file."""
    # here, not at the top: the MCP SDK takes 0.8 s to import, and every xdist worker of the
    # inner loop collected this file only to deselect it (issue 28 §7)
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    server = StdioServerParameters(
        command=ZUKE,
        args=["mcp", *flags],
        cwd=str(workdir),
        env=clean_env({"ZUKE_ACTOR": "agent-7", **(env or {})}),
    )
    with (workdir / "server.err").open("a") as errlog:
        async with (
            stdio_client(server, errlog=errlog) as (read, write),
            ClientSession(read, write) as client,
        ):
            await client.initialize()
            yield client


async def call(client: ClientSession, tool: str, **arguments: Any) -> Any:
    """A successful call's JSON result, the same as text and as structured content."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    (content,) = result.content
    assert json.loads(content.text) == result.structured_content  # type: ignore[union-attr]
    return result.structured_content


async def refused(client: ClientSession, tool: str, **arguments: Any) -> str:
    """A failed call's one message."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    (content,) = result.content
    return content.text  # type: ignore[union-attr]


def drive(body: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with anyio.fail_after(SESSION_S):
            await body()

    anyio.run(bounded)


def record(workdir: Path, run_id: str) -> RunRecord:
    found = FileSystemStateStore(workdir / ".zuke" / "runs").get_run(run_id)
    assert found is not None
    return found.record


def mcp_events(workdir: Path, run_id: str) -> list[tuple[str, str, str, dict[str, str]]]:
    return [
        (e.tool, e.actor, e.outcome, dict(e.args))
        for e in record(workdir, run_id).events
        if e.tool.startswith("mcp:")
    ]


def test_an_mcp_client_runs_a_gate_shows_resumes_and_cancels_over_stdio(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    ids: dict[str, str] = {}

    async def scenario() -> None:
        async with session(tmp_path) as client:
            assert [t.name for t in (await client.list_tools()).tools] == ALL_TOOLS
            listing = await call(client, "list_targets")
            assert [t["name"] for t in listing["targets"]] == [
                "deploy", "approve", "promote", "broken", "slow",
            ]  # fmt: skip
            gated = await call(client, "run_target", targets=["promote"], params={"token": SECRET})
            assert gated["status"] == "suspended"
            assert gated["waiting"]["approve"]["trigger"] == "signal:approved"
            ids["resumed"] = gated["runId"]
            shown = await call(client, "show_run", run_id=gated["runId"])
            assert shown["status"] == "suspended"
            assert shown["targets"]["approve"]["status"] == "waiting"
            resumed = await call(
                client, "resume_run", run_id=gated["runId"], signal="approved", data={"by": "qa"}
            )
            assert (resumed["action"], resumed["status"]) == ("resumed", "succeeded")
            second = await call(client, "run_target", targets=["promote"])
            ids["cancelled"] = second["runId"]
            cancelled = await call(client, "cancel_run", run_id=second["runId"], wait="0s")
            assert (cancelled["status"], cancelled["owner"]) == ("cancelled", None)
            message = await refused(client, "show_run", run_id="no-such-run")
            assert message.endswith('no run "no-such-run" in the store')
            # A run owned by another live process: its owner is asked to stop.
            owner = spawn(
                ["slow", "--markers", str(markers), "--state"], tmp_path, {"ZUKE_ACTOR": "ci"}
            )
            try:
                wait_until(lambda: (markers / "started").exists(), "the slow body to start")
                running = (markers / "started").read_text()
                stopped = await call(client, "cancel_run", run_id=running, wait="30s")
                assert stopped["status"] == "cancelled" and stopped["owner"] == "ci"
                code, _ = finish(owner)
                assert code == 130
            finally:
                kill(owner)
            ids["running"] = running

    drive(scenario)
    redacted = {"targets": '["promote"]', "params": '{"token": "[redacted]"}'}
    assert mcp_events(tmp_path, ids["resumed"]) == [
        ("mcp:run_target", "agent-7", "ok", redacted),
        ("mcp:show_run", "agent-7", "ok", {"run_id": ids["resumed"]}),
        (
            "mcp:resume_run",
            "agent-7",
            "ok",
            {"run_id": ids["resumed"], "signal": "approved", "data_bytes": "12"},
        ),
    ]
    assert record(tmp_path, ids["resumed"]).status == "succeeded"
    assert mcp_events(tmp_path, ids["cancelled"])[-1][:3] == ("mcp:cancel_run", "agent-7", "ok")
    assert record(tmp_path, ids["running"]).status == "cancelled"
    assert mcp_events(tmp_path, ids["running"])[-1][:3] == ("mcp:cancel_run", "agent-7", "ok")
    state = b"".join(p.read_bytes() for p in (tmp_path / ".zuke").rglob("*") if p.is_file())
    errlog = (tmp_path / "server.err").read_text()
    assert SECRET.encode() not in state and SECRET not in errlog
    assert "deploying 1.0" in errlog  # a body's print went to stderr, not the channel
    assert "Traceback" not in errlog


def test_no_run_and_no_cancel_leave_only_the_reading_tools_and_refuse_the_rest(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)

    async def scenario() -> None:
        async with session(tmp_path) as client:
            gated = await call(client, "run_target", targets=["promote"])
        async with session(tmp_path, "--no-run", "--no-cancel") as client:
            names = [t.name for t in (await client.list_tools()).tools]
            assert names == ["list_targets", "list_runs", "show_run"]
            message = await refused(client, "cancel_run", run_id=gated["runId"])
            assert "cancel_run is disabled: this server was started with zuke mcp --no-cancel" in (
                message
            )
            message = await refused(client, "run_target", targets=["deploy"])
            assert "run_target is disabled" in message
            runs = await call(client, "list_runs", status="suspended")
            assert [r["id"] for r in runs["runs"]] == [gated["runId"]]
            events = mcp_events(tmp_path, gated["runId"])
            assert events[-1] == (
                "mcp:cancel_run",
                "agent-7",
                "denied",
                {"run_id": gated["runId"], "wait": "1m"},
            )
            assert record(tmp_path, gated["runId"]).status == "suspended"

    drive(scenario)


def test_the_zuke_executable_is_what_the_client_starts() -> None:
    assert Path(ZUKE).name == "zuke" and Path(ZUKE).exists()


def test_a_run_the_server_is_running_can_be_listed_and_cancelled_from_the_same_client(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    started = markers / "started"
    answers: dict[str, Any] = {}

    async def scenario() -> None:
        async with session(tmp_path) as client:

            async def run_slow() -> None:
                answers["run"] = await call(
                    client, "run_target", targets=["slow"], params={"markers": str(markers)}
                )

            async with anyio.create_task_group() as group:
                group.start_soon(run_slow)
                while not started.exists():  # bounded by the session's fail_after
                    await anyio.sleep(0.01)
                run_id = started.read_text()
                listed = await call(client, "list_runs", status="running")
                assert [r["id"] for r in listed["runs"]] == [run_id]
                answers["cancel"] = await call(client, "cancel_run", run_id=run_id, wait="30s")

    drive(scenario)
    assert answers["cancel"]["status"] == "cancelled" and answers["cancel"]["owner"] == "agent-7"
    assert answers["run"]["status"] == "cancelled"
    assert answers["run"]["outcomes"]["slow"]["status"] == "failed"
    run_id = answers["run"]["runId"]
    # Both calls end when the run is settled: their events may land in either order.
    assert sorted(e[:3] for e in mcp_events(tmp_path, run_id)) == [
        ("mcp:cancel_run", "agent-7", "ok"),
        ("mcp:run_target", "agent-7", "ok"),
    ]


def test_cancel_run_over_stdio_runs_the_compensation_a_suspended_run_owes(
    tmp_path: Path,
) -> None:
    """The server settles the run itself (nobody owns it): with the build and its secret."""
    write_build(tmp_path, COMPENSATED_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    answers: dict[str, Any] = {}

    async def scenario() -> None:
        async with session(tmp_path, env={"TOKEN": SECRET}) as client:
            gated = await call(
                client, "run_target", targets=["approve"], params={"markers": str(markers)}
            )
            assert gated["status"] == "suspended"
            answers["cancel"] = await call(client, "cancel_run", run_id=gated["runId"], wait="0s")

    drive(scenario)
    cancelled = answers["cancel"]
    assert (cancelled["status"], cancelled["owner"]) == ("cancelled", None)
    assert cancelled["compensated"] == ["deploy → rollback"]
    assert (markers / "rolled-back").read_text() == "sit-7"
    settled = record(tmp_path, cancelled["runId"])
    assert settled.status == "cancelled"
    compensations = [(e.outcome, dict(e.args)) for e in settled.events if e.tool == "compensate"]
    assert compensations == [("ok", {"target": "deploy", "compensation": "rollback"})]
    assert mcp_events(tmp_path, cancelled["runId"])[-1][:3] == ("mcp:cancel_run", "agent-7", "ok")
    state = b"".join(p.read_bytes() for p in (tmp_path / ".zuke").rglob("*") if p.is_file())
    assert SECRET.encode() not in state
    assert SECRET not in (tmp_path / "server.err").read_text()
