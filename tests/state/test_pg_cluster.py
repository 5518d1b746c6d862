"""The throwaway cluster the Postgres tests run on, and what happens without Postgres."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
