"""The zuke commands on ``ZUKE_STATE=postgresql://``: a run suspends, is listed, resumes once."""

from __future__ import annotations

import re

import pytest

from tests.conftest import BuildWriter, CliRunner
from tests.pg_support import PgCluster, connected
from zuke.state import _pg_schema
from zuke.state.postgres import PostgresStateStore

BUILD = """
    from zuke import Build, external_signal, target

    class Release(Build):
        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("env-sit").with_ttl("5m")).executes(
                lambda ctx: ctx.state.set({"at": "sit"}))

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("72h"))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(
                lambda ctx: print("PROMOTE", ctx.signals["approved"].data["by"]))
"""


def test_a_gated_run_suspends_lists_and_resumes_once_on_postgres(
    cli: CliRunner, write_build: BuildWriter, pg_url: str
) -> None:
    env = {"ZUKE_STATE": pg_url}
    write_build(BUILD)
    started = cli("promote", env=env)
    assert started.code == 0, started.text
    match = re.search(r"Run (\S+) is suspended", started.out)
    assert match, started.out
    run_id = match.group(1)
    listed = cli("runs", "list", env=env)
    assert listed.code == 0 and run_id in listed.out and "suspended" in listed.out, listed.text
    resumed = cli("resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}', env=env)
    assert resumed.code == 0, resumed.text
    assert "PROMOTE qa" in resumed.out
    again = cli("resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}', env=env)
    assert again.code == 0 and "PROMOTE" not in again.out
    store = PostgresStateStore(pg_url)
    try:
        stored = store.get_run(run_id)
        assert stored is not None
        assert stored.record.status == "succeeded"
        assert stored.record.targets["deploy"].meta == {"at": "sit"}
        assert {t.status for t in stored.record.targets.values()} == {"succeeded"}
        assert store.list_locks() == []  # the lease and env-sit given back
    finally:
        store.close()


def test_state_init_migrates_a_fresh_database_and_says_so(
    cli: CliRunner, pg_cluster: PgCluster
) -> None:
    url = pg_cluster.create_database()
    with connected(url) as conn:  # nothing of zuke's yet
        assert conn.execute("SELECT to_regclass('zuke_runs')").fetchone() == (None,)
    result = cli("state", "init", env={"ZUKE_STATE": url})
    assert result.code == 0, result.text
    shown = url.split("?")[0]
    assert f"{shown} is ready (schema version" in result.out
    with connected(url) as conn:
        assert conn.execute("SELECT max(version) FROM zuke_schema_version").fetchone() == (
            _pg_schema.SCHEMA_VERSION,
        )
        assert conn.execute("SELECT count(*) FROM zuke_fence_floors").fetchone() == (1,)
    again = cli("state", "init", env={"ZUKE_STATE": url})  # twice is once
    assert again.code == 0 and "is ready" in again.out, again.text


@pytest.mark.psycopg
def test_state_init_on_a_server_that_refuses_is_one_line(cli: CliRunner) -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = cli("state", "init", env={"ZUKE_STATE": f"postgresql://zuke:pw@127.0.0.1:{port}/x"})
    assert result.code != 0
    lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("zuke: "), result.err
    assert f"127.0.0.1:{port}/x" in lines[0] and ":pw@" not in result.text
