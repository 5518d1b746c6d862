"""The store contract suite against ``HttpStateStore`` talking to a real ``zuke serve``.

One ``python -m zuke._serve`` process serves the module. Each scenario gets
its own namespace (a URL prefix), and a second class runs every scenario in
the root namespace that they all share, to show the server is safe as a
shared, persistent backend. Racers use separate clients (separate connection
pools), so the races are decided by the server's transactions.

Lock expiry is the server's wall clock: ``lapse`` takes a probe lock with the
same TTL *after* the lock being lapsed, then polls until the server hands the
probe out again — by then the earlier lock has expired too. It pauses
:data:`LAPSE_POLL_S` between probes: polling back to back kept the client and
the server each busy for the whole TTL, 21 times a run of this module (issue 28 §7).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.serve.support import TOKEN, ServerProcess, running_server
from zuke.state._protocol import LockAcquired, StateStore
from zuke.state.http import HttpStateStore
from zuke.testing.store_contract import StateStoreContract, sample_holder

LAPSE_DEADLINE_S = 15.0
#: the pause between two probes of ``lapse`` (a tenth of the contract's 200 ms TTL)
LAPSE_POLL_S = 0.02


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("serve-contract")) as s:
        yield s


class _ServeContract(StateStoreContract):
    lock_ttl_ms = 200
    #: through httpx (as for https and proxies), not the store's direct plain-http sockets
    via_httpx = False

    def base_url(self, server: ServerProcess) -> str:
        raise NotImplementedError

    def client(self) -> HttpStateStore:
        transport = httpx.HTTPTransport() if self.via_httpx else None
        return HttpStateStore(self._url, token=TOKEN, transport=transport)

    @pytest.fixture
    def store(self, server: ServerProcess) -> Iterator[HttpStateStore]:
        self._clients: list[HttpStateStore] = []
        self._url = self.base_url(server)
        store = self.client()
        yield store
        store.close()
        for client in self._clients:
            client.close()

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        client = self.client()
        self._clients.append(client)
        return client

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        probe = f"lapse-probe-{uuid.uuid4().hex}"
        assert isinstance(store.acquire_lock(probe, sample_holder("probe"), ttl_ms), LockAcquired)
        deadline = time.monotonic() + LAPSE_DEADLINE_S
        while not isinstance(
            store.acquire_lock(probe, sample_holder("probe"), ttl_ms), LockAcquired
        ):
            assert time.monotonic() < deadline, "the server never expired a lock"
            time.sleep(LAPSE_POLL_S)


class TestServeContractPerNamespace(_ServeContract):
    def base_url(self, server: ServerProcess) -> str:
        return f"{server.url}/contract/{uuid.uuid4().hex[:12]}"


class TestServeContractSharedRoot(_ServeContract):
    def base_url(self, server: ServerProcess) -> str:
        return server.url


class TestServeContractThroughHttpx(_ServeContract):
    """The path https and proxied deployments take, against the same real service."""

    via_httpx = True

    def base_url(self, server: ServerProcess) -> str:
        return f"{server.url}/contract-httpx/{uuid.uuid4().hex[:12]}"
