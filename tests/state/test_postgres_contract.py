"""The shipped store contract suite, unchanged, against ``PostgresStateStore`` on a real Postgres.

One database serves the module. One class gives each scenario its own
namespace; another runs every scenario in the shared empty namespace, to show
the store is safe as a shared, persistent backend. Racers get their own
store (their own pool), so races are decided by Postgres, not by Python.

Expiry is the database's clock. ``lapse`` moves every expiry of the store's
namespace back by the TTL (+1 ms), which is what advancing that clock does to
them — no waiting; ``test_postgres_store`` checks that real time expires a lock.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.pg_support import PgCluster
from zuke.state._protocol import StateStore
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import StateStoreContract


@pytest.fixture(scope="module")
def pg_url(pg_cluster: PgCluster) -> str:
    return pg_cluster.create_database()


class _PostgresContract(StateStoreContract):
    def namespace(self) -> str:
        raise NotImplementedError

    @pytest.fixture
    def store(self, pg_url: str) -> Iterator[PostgresStateStore]:
        self._stores: list[PostgresStateStore] = []
        self._url = pg_url
        store = PostgresStateStore(pg_url, namespace=self.namespace())
        yield store
        store.close()
        for racer in self._stores:
            racer.close()

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        assert isinstance(store, PostgresStateStore)
        racer = PostgresStateStore(self._url, namespace=store.namespace, max_connections=1)
        self._stores.append(racer)
        return racer

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        assert isinstance(store, PostgresStateStore)
        with store.database.connection() as conn:
            conn.execute(
                "UPDATE zuke_locks SET expires_at = expires_at - %s * interval '1 millisecond'"
                " WHERE ns = %s AND expires_at IS NOT NULL",
                (ttl_ms + 1, store.namespace),
            )


class TestPostgresContractPerNamespace(_PostgresContract):
    def namespace(self) -> str:
        return f"contract-{uuid.uuid4().hex[:12]}"


class TestPostgresContractSharedNamespace(_PostgresContract):
    def namespace(self) -> str:
        return ""
