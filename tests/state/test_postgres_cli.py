"""The zuke commands on ``ZUKE_STATE=postgresql://``: a run suspends, is listed, resumes once."""

from __future__ import annotations

import re

import pytest

from tests.conftest import BuildWriter, CliRunner
from tests.pg_support import PgCluster
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


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    return pg_cluster.create_database()


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
