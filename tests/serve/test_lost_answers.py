"""A lost answer through ``zuke serve`` (SQLite and Postgres), with a second writer between
the loss and the look.

The HTTP client sends every create, put, patch and acquisition with an
idempotency key (``x-zuke-write-id``) and sends one that got no answer again;
the service keeps the key with the write and answers the same request as it
landed — whatever another writer (here: another client, straight to the
service) did in between. The same write sent again after a call that ended
unsure keeps its key too. A server without the extension (the TypeScript
one) ignores the header: the resend then meets a 412, as before.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.pg_support import PgCluster
from tests.serve.losing_http import LosingHttpProxy
from tests.serve.support import TOKEN
from zuke._errors import StoreUnavailableError
from zuke._serve import StateServer
from zuke.state import _http_client
from zuke.state._protocol import Conflict, LockAcquired, LockHeld, Written
from zuke.state._unsure import UnsureWriteError
from zuke.state.http import HttpStateStore
from zuke.state.records import RunDelta, RunEvent, Signal
from zuke.testing.store_contract import fresh, sample_holder, sample_record

AT = "2026-01-02T03:04:05.000Z"


@pytest.fixture(params=["sqlite", "postgres"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateServer]:
    if request.param == "sqlite":
        db: str | Path = tmp_path / "state.db"
    else:
        cluster: PgCluster = request.getfixturevalue("pg_cluster")
        db = cluster.create_database()
    with StateServer(db_path=db, token=TOKEN) as running:
        yield running


@pytest.fixture
def proxy(server: StateServer) -> Iterator[LosingHttpProxy]:
    losing = LosingHttpProxy(server.port)
    yield losing
    losing.close()


@pytest.fixture
def store(proxy: LosingHttpProxy) -> Iterator[HttpStateStore]:
    with HttpStateStore(proxy.url, token=TOKEN) as s:
        yield s


@pytest.fixture
def other(server: StateServer) -> Iterator[HttpStateStore]:
    with HttpStateStore(server.url, token=TOKEN) as s:
        yield s


def _signal(store: HttpStateStore, run_id: str) -> None:
    current = store.get_run(run_id)
    assert current is not None
    delta = RunDelta(updated_at=AT, signals={"go": Signal(data={"by": "bob"}, received_at=AT)})
    assert isinstance(store.append_run(run_id, delta, expected_version=current.version), Written)


def _marked(marker: str) -> RunDelta:
    return RunDelta(updated_at=AT, events=(RunEvent(at=AT, tool="t", actor="a", detail=marker),))


def _events(store: HttpStateStore, run_id: str, marker: str) -> int:
    stored = store.get_run(run_id)
    assert stored is not None
    return [e.detail for e in stored.record.events].count(marker)


def _holding(marker: str, method: str) -> object:
    return lambda m, path, body: m == method and marker.encode() in body


def test_a_patch_that_landed_is_written_though_a_signal_landed_before_the_resend(
    store: HttpStateStore, other: HttpStateStore, proxy: LosingHttpProxy
) -> None:
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    marker = f"marker-{uuid.uuid4().hex}"
    proxy.arm(_holding(marker, "PATCH"), lambda: _signal(other, record.id))  # type: ignore[arg-type]
    result = store.append_run(record.id, _marked(marker), expected_version=created.version)
    assert proxy.lost.is_set()
    assert isinstance(result, Written)  # not a 412 the writer would re-apply
    assert _events(other, record.id, marker) == 1
    stored = other.get_run(record.id)
    assert stored is not None and "go" in stored.record.signals
    assert stored.version != result.version


def test_a_create_and_a_put_that_landed_are_written_though_another_write_came_between(
    store: HttpStateStore, other: HttpStateStore, proxy: LosingHttpProxy
) -> None:
    record = sample_record(fresh())
    proxy.arm(
        lambda m, path, body: m == "PUT" and record.id.encode() in body,
        lambda: _signal(other, record.id),
    )
    created = store.create_run(record)
    assert proxy.lost.is_set()
    assert isinstance(created, Written), created  # not "the run exists"
    current = other.get_run(record.id)
    assert current is not None
    marker = f"marker-{uuid.uuid4().hex}"
    proxy.arm(_holding(marker, "PUT"), lambda: _signal(other, record.id))  # type: ignore[arg-type]
    put = store.put_run(replace(current.record, actor=marker), expected_version=current.version)
    assert proxy.lost.is_set()
    assert isinstance(put, Written), put


def test_an_acquisition_that_landed_is_acquired_with_its_token_though_it_was_broken_between(
    store: HttpStateStore, other: HttpStateStore, proxy: LosingHttpProxy
) -> None:
    key = fresh("lock")
    proxy.arm(lambda m, path, body: m == "POST" and key in path, lambda: other.break_lock(key))
    taken = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert proxy.lost.is_set()
    assert isinstance(taken, LockAcquired)
    assert other.list_locks() == []  # the break stands: not taken again by the resend
    assert store.renew_lock(key, taken.token, 60_000) is False


def test_a_release_whose_answer_was_lost_leaves_the_next_holders_claim_alone(
    store: HttpStateStore, other: HttpStateStore, proxy: LosingHttpProxy
) -> None:
    key = fresh("lock")
    taken = store.acquire_lock(key, sample_holder("a"), 60_000)
    assert isinstance(taken, LockAcquired)
    proxy.arm(
        lambda m, path, body: m == "DELETE" and key in path,
        lambda: other.acquire_lock(key, sample_holder("b"), 60_000),
    )
    with pytest.raises(StoreUnavailableError):
        store.release_lock(key, taken.token)  # unkeyed: one line, as before
    assert proxy.lost.is_set()
    store.release_lock(key, taken.token)  # sent again by the caller: a no-op
    assert other.acquire_lock(key, sample_holder("c"), 60_000) == LockHeld(sample_holder("b"))


def test_the_same_patch_sent_again_after_an_unsure_failure_is_answered_as_it_landed(
    store: HttpStateStore, other: HttpStateStore, proxy: LosingHttpProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(_http_client, "RESEND_PAUSES_S", ())  # the call gives up at once
    record = sample_record(fresh())
    created = store.create_run(record)
    assert isinstance(created, Written)
    marker = f"marker-{uuid.uuid4().hex}"
    delta = replace(_marked(marker), status="suspended")
    proxy.arm(_holding(marker, "PATCH"))  # type: ignore[arg-type]
    with pytest.raises(UnsureWriteError):
        store.append_run(record.id, delta, expected_version=created.version)
    _signal(other, record.id)
    again = store.append_run(record.id, delta, expected_version=created.version)
    assert isinstance(again, Written)
    assert _events(other, record.id, marker) == 1
    assert store.append_run(record.id, _marked("x"), expected_version=created.version) == Conflict()
