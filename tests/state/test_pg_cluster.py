"""The throwaway cluster the Postgres tests run on: it answers, as Postgres 15 or later."""

from __future__ import annotations

from tests.state.pg_support import PgCluster


def test_the_session_cluster_answers_on_loopback(pg_cluster: PgCluster) -> None:
    import psycopg

    with psycopg.connect(pg_cluster.url(), autocommit=True) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int, inet_server_addr()")
        version, address = row.fetchone() or (0, None)
    assert version >= 150000
    assert str(address) == "127.0.0.1"
    assert pg_cluster.data.is_dir()
