"""The throwaway cluster the Postgres tests run on, and what happens without Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests import pg_place
from tests.child import LEAN_PLUGINS
from tests.pg_fixtures import SHARED_DIR, SHARED_OWNER
from tests.pg_support import (
    BINDIR_ENV,
    REQUIRE_ENV,
    SHARED_INFO,
    PgCluster,
    connected,
    shared_cluster,
    stop_shared,
)
from zuke.state._pg_schema import SCHEMA_VERSION

ROOT = Path(__file__).resolve().parents[2]


def test_the_session_cluster_answers_on_loopback(pg_cluster: PgCluster) -> None:
    with connected(pg_cluster.url()) as conn:
        row = conn.execute("SELECT current_setting('server_version_num')::int, inet_server_addr()")
        version, address = row.fetchone() or (0, None)
    assert version >= 150000
    assert str(address) == "127.0.0.1"
    assert pg_cluster.data.is_dir()


def _child_pytest(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """This module's first test in a child pytest, with no Postgres binaries to find."""
    test = f"{Path(__file__).relative_to(ROOT)}::test_the_session_cluster_answers_on_loopback"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", *LEAN_PLUGINS, test],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), BINDIR_ENV: "/nonexistent", **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.psycopg
def test_without_postgres_the_tests_skip_saying_why() -> None:
    child = _child_pytest({REQUIRE_ENV: ""})
    assert child.returncode == 0, child.stdout
    assert "1 skipped" in child.stdout
    assert "Postgres tests not run: no Postgres binaries" in child.stdout


def test_without_postgres_ci_fails() -> None:
    child = _child_pytest({REQUIRE_ENV: "1"})
    assert child.returncode == 1, child.stdout
    assert f"{REQUIRE_ENV}=1" in child.stdout
    assert "skipped" not in child.stdout


def test_xdist_workers_share_one_cluster_the_controller_owns(
    pg_cluster: PgCluster, request: pytest.FixtureRequest
) -> None:
    """Under xdist the workers share the controller's cluster (its directory names the
    controller, for ``reap_orphans``); alone, the session owns its own."""
    workerinput = getattr(request.config, "workerinput", None)
    if workerinput is None:
        owner = os.getpid()
    else:
        owner = workerinput[SHARED_OWNER]
        assert owner == os.getppid()
        shown = json.loads((Path(workerinput[SHARED_DIR]) / SHARED_INFO).read_text())
        assert (shown["root"], shown["port"]) == (str(pg_cluster.root), pg_cluster.port)
    assert pg_cluster.root.name.startswith(f"zuke-pg-{owner}-")


def test_a_described_shared_cluster_is_joined_not_started(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    shown = {"root": str(pg_cluster.root), "port": pg_cluster.port, "bin": str(pg_cluster.bin)}
    (tmp_path / SHARED_INFO).write_text(json.dumps(shown))
    joined = shared_cluster(tmp_path, owner=os.getpid())
    assert (joined.root, joined.port) == (pg_cluster.root, pg_cluster.port)
    with connected(joined.url()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_stopping_a_shared_directory_without_a_cluster_only_removes_it(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    stop_shared(shared)
    assert not shared.exists()


def test_databases_are_made_on_one_kept_connection_and_survive_its_loss(
    pg_cluster: PgCluster,
) -> None:
    """One backend per process makes every database (none started per database); should it
    die (a restart, a terminated backend), the next database is made on a new one."""
    first = pg_cluster.create_database()
    maker = pg_cluster._maintenance
    assert maker is not None
    pid = maker.backend_pid()
    second = pg_cluster.create_database()
    assert pg_cluster._maintenance is maker and maker.backend_pid() == pid
    with connected(pg_cluster.url()) as conn:
        assert conn.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
    third = pg_cluster.create_database()
    assert pg_cluster._maintenance is not None and pg_cluster._maintenance is not maker
    assert len({first, second, third}) == 3
    for url in (first, second, third):
        with connected(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)


def test_clusters_go_to_dev_shm_when_it_has_room_else_the_temp_dir(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(pg_place.TMPDIR_ENV, raising=False)
    roomy = tmp_path / "shm"
    roomy.mkdir()
    monkeypatch.setattr(pg_place, "SHM", roomy)
    monkeypatch.setattr(pg_place, "ROOM_BYTES", 1)
    assert pg_place.parent() == roomy
    monkeypatch.setattr(pg_place, "ROOM_BYTES", 1 << 62)  # more than any disk has
    assert pg_place.parent() == Path(tempfile.gettempdir())
    monkeypatch.setattr(pg_place, "SHM", tmp_path / "none")  # no /dev/shm at all
    monkeypatch.setattr(pg_place, "ROOM_BYTES", 1)
    assert pg_place.parent() == Path(tempfile.gettempdir())


def test_a_named_directory_holds_the_clusters_and_is_searched_for_orphans(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(pg_place.TMPDIR_ENV, str(tmp_path))
    monkeypatch.setattr(pg_place, "ROOM_BYTES", 1)
    assert pg_place.parent() == tmp_path
    places = pg_place.parents()
    assert places[0] == tmp_path and Path(tempfile.gettempdir()) in places
    assert len(places) == len(set(places))


def test_the_session_cluster_is_where_orphans_are_looked_for(pg_cluster: PgCluster) -> None:
    assert pg_cluster.root.parent in pg_place.parents()


def test_a_migrated_database_is_a_fresh_copy_at_the_current_schema(pg_cluster: PgCluster) -> None:
    """Copied from one database per process that the store migrated; an empty one has no
    zuke table at all."""
    first, second = (pg_cluster.create_database(migrated=True) for _ in range(2))
    template = pg_cluster._template
    assert template is not None and first != second
    assert pg_cluster.create_database(migrated=True) and pg_cluster._template == template
    for url in (first, second):
        with connected(url) as conn:  # before any store opened it
            rows = conn.execute("SELECT version FROM zuke_schema_version ORDER BY version")
            assert [v for (v,) in rows.fetchall()] == list(range(1, SCHEMA_VERSION + 1))
            assert conn.execute("SELECT count(*) FROM zuke_runs").fetchone() == (0,)
    with connected(first) as conn:
        conn.execute("INSERT INTO zuke_schema_version (version) VALUES (99)")
    with connected(second) as conn:  # copies, not one database
        assert conn.execute("SELECT max(version) FROM zuke_schema_version").fetchone() == (
            SCHEMA_VERSION,
        )
    with connected(pg_cluster.create_database()) as conn:
        assert conn.execute("SELECT to_regclass('zuke_schema_version')").fetchone() == (None,)
