"""``zuke serve --db postgresql://…``: the same API, on Postgres, through two replicas.

Two :class:`StateServer` replicas in process share one database. The shipped
store contract suite runs through them (its racers alternate between the
replicas, so a race is decided by Postgres, not by either process); the JSON
edge cases and the build catalog scenarios written for SQLite run unchanged
against a replica (imported below: pytest runs them with this module's
fixtures). Then what is Postgres' own: namespaces are the tables' ``ns``
column (the direct store sees the same runs), ETags are the row's version,
a database that goes away is a 503 and a log line without the password, and
``--db`` is checked and never printed with its password.

Expiry is the database's clock: ``lapse`` moves the namespace's expiries
back, as in ``tests/state/test_postgres_contract.py``.
"""

from __future__ import annotations

import io
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.pg_support import PgCluster, connected
from tests.serve.support import TOKEN, in_process
from tests.serve.test_builds import (  # noqa: F401  (run here against Postgres)
    test_a_descriptor_with_a_bad_indexed_field_is_refused_with_400,
    test_a_registered_build_round_trips_verbatim_with_its_etag,
    test_a_write_without_a_precondition_is_428_and_a_body_not_an_object_400,
    test_an_update_at_the_current_etag_lands_and_a_stale_one_is_412,
    test_builds_are_per_namespace,
    test_deregister_removes_and_deregistering_again_is_404,
    test_list_filters_by_name_and_since_newest_first,
    test_registration_keeps_the_first_created_at,
    test_since_is_a_time_with_offsets_and_fractions,
)
from tests.serve.test_json_and_queries import (  # noqa: F401  (run here against Postgres)
    test_a_huge_or_non_ascii_limit_is_a_400_not_a_500,
    test_a_key_of_201_characters_gets_the_message_every_store_gives,
    test_a_patch_and_a_lock_holder_with_a_lone_surrogate_are_refused_with_400,
    test_a_since_that_is_not_an_instant_is_refused,
    test_a_surrogate_pair_is_stored_and_a_lone_surrogate_refused_with_400,
    test_a_ttl_out_of_bounds_gets_the_message_every_store_gives,
    test_list_locks_refuses_an_unsafe_run_id,
    test_list_runs_filters_by_build,
    test_nan_and_infinity_are_not_json_and_are_refused_with_400,
    test_since_compares_times_not_text,
    test_the_largest_limit_is_accepted,
    test_the_longest_ttl_and_a_fractional_one_are_accepted,
)
from zuke._serve import StateServer
from zuke._serve.__main__ import main
from zuke._serve.server import ServeLimits
from zuke.state._protocol import LockAcquired, LockHeld, StateStore, Written
from zuke.state.http import HttpStateStore
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import GraphNode, LockHolder, RunDelta, RunRecord
from zuke.state.wire import record_to_json
from zuke.testing.store_contract import StateStoreContract

PASSWORD = f"pw-{uuid.uuid4().hex}"


def with_password(url: str) -> str:
    """The URL with a password (the test cluster trusts loopback, so any password works)."""
    return url.replace("postgresql://zuke@", f"postgresql://zuke:{PASSWORD}@", 1)


@pytest.fixture(scope="module")
def pg_url(pg_cluster: PgCluster) -> str:
    return pg_cluster.create_database()


@pytest.fixture(scope="module")
def replicas(
    pg_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[StateServer, StateServer]]:
    work = tmp_path_factory.mktemp("pg-serve")
    with (
        in_process(work, db=with_password(pg_url)) as (a, _),
        in_process(work, db=with_password(pg_url)) as (b, _),
    ):
        yield a, b


@pytest.fixture(scope="module")
def served(replicas: tuple[StateServer, StateServer]) -> Iterator[tuple[StateServer, httpx.Client]]:
    server = replicas[0]
    headers = {"Authorization": f"Bearer {TOKEN}", "x-zuke-state-protocol": "1"}
    with httpx.Client(base_url=server.url, headers=headers) as client:
        yield server, client


@pytest.fixture
def raw(served: tuple[StateServer, httpx.Client]) -> httpx.Client:
    return served[1]


@pytest.fixture
def store(served: tuple[StateServer, httpx.Client]) -> Iterator[HttpStateStore]:
    with HttpStateStore(f"{served[0].url}/ns/{uuid.uuid4().hex[:10]}", token=TOKEN) as s:
        yield s


def record(run_id: str, **fields: str) -> RunRecord:
    return RunRecord(
        id=run_id, build=fields.get("build", "PgServe"), root_target="deploy",
        status="running", actor=fields.get("actor", "tester"),
        created_at="2026-03-01T00:00:00.000Z", updated_at="2026-03-01T00:00:00.000Z",
        graph=(GraphNode("deploy"),),
    )  # fmt: skip


def holder(run_id: str) -> LockHolder:
    return LockHolder(actor="tester", run_id=run_id, since="2026-03-01T00:00:00Z")


# ------------------------------------------------------------------ the contract, two replicas


class _ThroughReplicas(StateStoreContract):
    def prefix(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(
        self, replicas: tuple[StateServer, StateServer], pg_url: str
    ) -> Iterator[HttpStateStore]:
        self._replicas, self._pg_url, self._ns = replicas, pg_url, self.prefix()
        self._clients: list[HttpStateStore] = []
        store = self._client(0)
        yield store
        for client in self._clients:
            client.close()

    def _client(self, index: int) -> HttpStateStore:
        base = self._replicas[index % 2].url + (f"/{self._ns}" if self._ns else "")
        client = HttpStateStore(base, token=TOKEN)
        self._clients.append(client)
        return client

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        return self._client(index + 1)  # racers alternate: B, A, B, …

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        direct = PostgresStateStore(self._pg_url)
        try:
            with direct.database.connection() as conn:
                conn.execute(
                    "UPDATE zuke_locks SET expires_at = expires_at - %s * interval '1 millisecond'"
                    " WHERE ns = %s AND expires_at IS NOT NULL",
                    (ttl_ms + 1, self._ns),
                )
        finally:
            direct.close()


class TestContractThroughTwoReplicasPerNamespace(_ThroughReplicas):
    def prefix(self) -> str:
        return f"contract/{uuid.uuid4().hex[:12]}"


class TestContractThroughTwoReplicasSharedRoot(_ThroughReplicas):
    def prefix(self) -> str:
        return ""


# ------------------------------------------------------------------ Postgres' own


def test_a_namespace_is_the_tables_ns_so_the_direct_store_sees_the_same_runs(
    replicas: tuple[StateServer, StateServer], pg_url: str
) -> None:
    ns = f"team-{uuid.uuid4().hex[:8]}"
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    with HttpStateStore(f"{replicas[0].url}/{ns}", token=TOKEN) as served:
        assert isinstance(served.create_run(record(run_id)), Written)
    direct, root = PostgresStateStore(pg_url, namespace=ns), PostgresStateStore(pg_url)
    try:
        stored = direct.get_run(run_id)
        assert stored is not None and stored.record == record(run_id)
        assert root.get_run(run_id) is None
        other = f"r-{uuid.uuid4().hex[:8]}"
        assert isinstance(direct.create_run(record(other, actor="direct")), Written)
    finally:
        direct.close()
        root.close()
    with HttpStateStore(f"{replicas[1].url}/{ns}", token=TOKEN) as served:
        seen = served.get_run(other)
        assert seen is not None and seen.record.actor == "direct"


def test_etags_are_the_rows_version_and_preconditions_hold_across_replicas(
    replicas: tuple[StateServer, StateServer],
) -> None:
    a, b = (httpx.Client(base_url=s.url, headers={"Authorization": f"Bearer {TOKEN}"})
            for s in replicas)  # fmt: skip
    with a, b:
        run_id = f"r-{uuid.uuid4().hex[:8]}"
        body = record_to_json(record(run_id))
        body["unknownToZuke"] = {"kept": [1, "two", None]}
        created = a.put(f"/runs/{run_id}", headers={"If-None-Match": "*"}, json=body)
        assert created.status_code == 201
        first = created.headers["etag"]
        assert re.fullmatch(r'"\d+"', first)
        got = b.get(f"/runs/{run_id}")
        assert (got.headers["etag"], got.json()) == (first, body)  # as sent, unknown fields too
        delta = {"updatedAt": "2026-03-01T00:00:01.000Z", "status": "suspended"}
        patched = b.patch(f"/runs/{run_id}", headers={"If-Match": first}, json=delta)
        assert patched.status_code == 200
        assert (
            a.patch(f"/runs/{run_id}", headers={"If-Match": first}, json=delta).status_code == 412
        )
        assert a.put(f"/runs/{run_id}", headers={"If-Match": '"x"'}, json=body).status_code == 412
        assert a.get(f"/runs/{run_id}").json()["status"] == "suspended"
        anyway = a.put(f"/runs/{run_id}", headers={"If-Match": "*"}, json=body)
        assert anyway.status_code == 200 and anyway.headers["etag"] != patched.headers["etag"]
        gone = f"r-{uuid.uuid4().hex[:8]}"
        assert b.patch(f"/runs/{gone}", headers={"If-Match": first}, json=delta).status_code == 404
        assert b.delete(f"/runs/{run_id}").status_code == 200
        assert a.delete(f"/runs/{run_id}").status_code == 404


def test_a_lock_taken_through_one_replica_is_held_through_the_other(
    replicas: tuple[StateServer, StateServer],
) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    with (
        HttpStateStore(replicas[0].url, token=TOKEN) as a,
        HttpStateStore(replicas[1].url, token=TOKEN) as b,
    ):
        taken = a.acquire_lock(key, holder("run-a"), 60_000)
        assert isinstance(taken, LockAcquired)
        assert b.acquire_lock(key, holder("run-b"), 60_000) == LockHeld(holder=holder("run-a"))
        assert b.renew_lock(key, taken.token, 60_000)
        assert not b.renew_lock(key, "not-the-token", 60_000)
        assert [e.key for e in b.list_locks(run_id="run-a")] == [key]
        b.release_lock(key, taken.token)
        again = b.acquire_lock(key, holder("run-b"), 60_000)
        assert isinstance(again, LockAcquired) and again.fence > taken.fence


def test_a_journal_of_appends_reads_back_folded_through_either_replica(
    replicas: tuple[StateServer, StateServer],
) -> None:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    with (
        HttpStateStore(replicas[0].url, token=TOKEN) as a,
        HttpStateStore(replicas[1].url, token=TOKEN) as b,
    ):
        written = a.create_run(record(run_id))
        assert isinstance(written, Written)
        version = written.version
        for i in range(5):
            client = (a, b)[i % 2]
            delta = RunDelta(updated_at=f"2026-03-01T00:00:0{i + 1}.000Z", actor=f"actor-{i}")
            appended = client.append_run(run_id, delta, expected_version=version)
            assert isinstance(appended, Written)
            version = appended.version
        stored = b.get_run(run_id)
        assert stored is not None
        assert (stored.record.actor, stored.version) == ("actor-4", version)


def test_a_database_that_goes_away_is_a_503_and_one_log_line_without_the_password(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    url = with_password(pg_cluster.create_database())
    log = io.StringIO()
    limits = ServeLimits(request_timeout_s=1.0)  # also how long a request waits for Postgres
    with in_process(tmp_path, db=url, log=log, limits=limits) as (server, client):
        assert client.get("/runs/absent").status_code == 404
        name = url.rsplit("/", 1)[1]
        with connected(pg_cluster.url()) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        answer = client.get("/runs/absent")
        assert answer.status_code == 503
        assert answer.json() == {"error": "the state database is unavailable"}
        assert PASSWORD not in repr(server)
    lines = [line for line in log.getvalue().splitlines() if "GET /runs/absent:" in line]
    assert len(lines) == 1 and f"postgresql://zuke@127.0.0.1:{pg_cluster.port}/{name}" in lines[0]
    assert PASSWORD not in log.getvalue()


@pytest.mark.psycopg
def test_an_unreachable_database_is_one_line_exit_1_without_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        ["--no-auth", "--port", "0", "--db", f"postgresql://zuke:{PASSWORD}@127.0.0.1:1/db"]
    )
    err = capsys.readouterr().err
    assert code == 1
    assert len(err.splitlines()) == 1, err
    assert err.startswith("zuke serve: cannot start: state: cannot use Postgres at ")
    assert "postgresql://zuke@127.0.0.1:1/db" in err and "--db" in err
    assert PASSWORD not in err


@pytest.mark.parametrize("db", ["mysql://root:secret@db/zuke", "sqlite://x.db"])
def test_a_db_of_another_scheme_is_a_usage_error_in_one_line(
    db: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["--no-auth", "--port", "0", "--db", db]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "secret" not in err
    assert "neither a SQLite file nor a postgresql:// URL" in err
    assert list(tmp_path.iterdir()) == []  # no directory named after the scheme


def test_help_shows_the_postgres_form(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "postgresql://USER@HOST:PORT/DB" in " ".join(capsys.readouterr().out.split())


def test_connections_the_server_killed_are_replaced_without_a_failed_request(
    pg_cluster: PgCluster, tmp_path: Path
) -> None:
    """What a database restart does to a replica's pool: every connection dies at once."""
    url = pg_cluster.create_database()
    name = url.rsplit("/", 1)[1]
    with in_process(tmp_path, db=url) as (server, _), HttpStateStore(server.url, token=TOKEN) as s:
        run_id = f"r-{uuid.uuid4().hex[:8]}"
        written = s.create_run(record(run_id))
        assert isinstance(written, Written)
        with connected(pg_cluster.url()) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        delta = RunDelta(updated_at="2026-03-01T00:00:01.000Z", actor="after-the-kill")
        appended = s.append_run(run_id, delta, expected_version=written.version)
        assert isinstance(appended, Written)
        stored = s.get_run(run_id)
        assert stored is not None
        assert (stored.record.actor, stored.version) == ("after-the-kill", appended.version)
        assert isinstance(s.acquire_lock(f"k-{run_id}", holder(run_id), 60_000), LockAcquired)


def test_a_bad_pool_size_is_one_line_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    monkeypatch.setenv("ZUKE_PG_POOL_SIZE", "lots")
    assert main(["--no-auth", "--port", "0", "--db", with_password(pg_url)]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and PASSWORD not in err
    assert "ZUKE_PG_POOL_SIZE must be a whole number" in err


def test_the_postgres_scheme_names_the_same_database(
    replicas: tuple[StateServer, StateServer], pg_url: str, tmp_path: Path
) -> None:
    run_id = f"r-{uuid.uuid4().hex[:8]}"
    with HttpStateStore(replicas[0].url, token=TOKEN) as a:
        assert isinstance(a.create_run(record(run_id)), Written)
    short = pg_url.replace("postgresql://", "postgres://", 1)
    with in_process(tmp_path, db=short) as (_, client):
        assert client.get(f"/runs/{run_id}").status_code == 200
