"""The Postgres fixtures (see ``pg_support``) and CI's rule about them; ``conftest`` loads them.

``pg_cluster`` is one throwaway cluster for the session — under xdist, one for
the whole run, shared by the workers and stopped by the controller at the end
(``pg_support.shared_cluster``) — ``pg_url`` a fresh database on it for one
test (marked ``pg_migrated``: already at the store's schema), ``restartable`` a
cluster of a test module's own for tests that restart it. Without Postgres it
skips with a loud reason — unless
``ZUKE_REQUIRE_POSTGRES=1`` (``.ci/run``), where it fails, and where any other
skip of a test that uses it fails too: CI must never pass with the Postgres
tests silently skipped.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.pg_support import (
    REQUIRE_ENV,
    LosingProxy,
    PgCluster,
    required,
    shared_cluster,
    start_cluster,
    stop_shared,
    unavailable,
)

#: the workers' input naming the shared cluster's directory and its owner (the controller)
SHARED_DIR = "zuke_pg_shared_dir"
SHARED_OWNER = "zuke_pg_shared_owner"
_shared_dir = pytest.StashKey[Path]()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist's controller, for each worker: where the run's one cluster is described."""
    config: pytest.Config = node.config
    if _shared_dir not in config.stash:
        config.stash[_shared_dir] = Path(tempfile.mkdtemp(prefix="zuke-pg-shared-"))
    node.workerinput[SHARED_DIR] = str(config.stash[_shared_dir])
    node.workerinput[SHARED_OWNER] = os.getpid()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The controller stops the shared cluster once every worker is done with it."""
    if _shared_dir in config.stash:
        stop_shared(config.stash[_shared_dir])


@pytest.fixture(scope="session")
def pg_cluster(request: pytest.FixtureRequest) -> Iterator[PgCluster]:
    reason = unavailable()
    if reason is not None:
        message = f"Postgres tests not run: {reason}"
        if required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(f"{message} (set {REQUIRE_ENV}=1 to make this an error)")
    workerinput: dict[str, Any] = getattr(request.config, "workerinput", {})
    if SHARED_DIR in workerinput:  # an xdist worker: the controller stops it
        yield shared_cluster(Path(workerinput[SHARED_DIR]), workerinput[SHARED_OWNER])
        return
    # also stopped at exit (atexit), should this finaliser not run
    cluster = start_cluster(placed=True)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(request: pytest.FixtureRequest, pg_cluster: PgCluster) -> str:
    """A fresh database on the session's cluster, for one test (a module may override it):
    empty, or — marked ``pg_migrated``, a test whose subject is not the migration — already
    at the current schema (a copy of one this process migrated), which saves the server the
    migration."""
    migrated = request.node.get_closest_marker("pg_migrated") is not None
    return pg_cluster.create_database(migrated=migrated)


@pytest.fixture
def proxy(pg_cluster: PgCluster) -> Iterator[LosingProxy]:
    """A proxy in front of the session's cluster that can lose one request or its answer."""
    losing = LosingProxy(pg_cluster.port)
    yield losing
    losing.close()


@pytest.fixture(scope="module")
def restartable(pg_cluster: PgCluster) -> Iterator[PgCluster]:
    """A cluster of the test module's own, for tests that restart or stop it (``pg_cluster``
    first: its skip and CI rules apply)."""
    cluster = start_cluster(placed=True)
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``psycopg`` needs the postgres extra (psycopg2), not a cluster: without
    it, skip."""
    if item.get_closest_marker("psycopg") is None:
        return
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        message = "psycopg2 is not installed: pip install 'zuke[postgres]'"
        if required():
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(f"Postgres tests not run: {message}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and required() and "pg_cluster" in getattr(item, "fixturenames", ()):
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_ENV}=1 but a Postgres test was skipped: {report.longrepr}"
