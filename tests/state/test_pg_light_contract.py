"""The shipped store contract suite, unchanged, against the store ``ZUKE_STATE`` names: the
light path (libpq through ctypes) carrying reads *and* writes, on a real Postgres.

Each scenario's store and racers are light stores that never open psycopg's pool
(checked after each scenario), so every compare-and-swap, append, lock decision
and race here is decided through :mod:`zuke.state._pg_libpq`. ``lapse`` moves the
namespace's expiries back through a separate full store, as the other contract
module does, so the scenario's own store stays on the light path.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.pg_support import PgCluster
from zuke.state._pg_light import LightPostgresStore
from zuke.state._protocol import StateStore
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import StateStoreContract


@pytest.fixture(scope="module")
def pg_url(pg_cluster: PgCluster) -> str:
    url = pg_cluster.create_database()
    full = PostgresStateStore(url)
    full.initialize()  # the light path reads a schema at this zuke's version, or steps aside
    full.close()
    return url


class TestLightPostgresContract(StateStoreContract):
    @pytest.fixture
    def store(self, pg_url: str) -> Iterator[LightPostgresStore]:
        self._url = pg_url
        self._full = PostgresStateStore(pg_url)
        self._stores: list[LightPostgresStore] = []
        store = LightPostgresStore(pg_url, namespace=f"light-{uuid.uuid4().hex[:12]}")
        self._stores.append(store)
        yield store
        try:
            for each in self._stores:  # every call went through libpq
                assert each.reader.usable
                assert getattr(each.database, "_pool", None) is None
        finally:
            for each in self._stores:
                each.close()
            self._full.close()

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        assert isinstance(store, LightPostgresStore)
        racer = LightPostgresStore(self._url, namespace=store.namespace, max_connections=1)
        self._stores.append(racer)
        return racer

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        assert isinstance(store, LightPostgresStore)
        with self._full.database.connection() as conn:
            conn.execute(
                "UPDATE zuke_locks SET expires_at = expires_at - %s * interval '1 millisecond'"
                " WHERE ns = %s AND expires_at IS NOT NULL",
                (ttl_ms + 1, store.namespace),
            )
