"""A real ``zuke serve`` that refuses or fails writes: 413 (a body over its limit) and 500.

The CLI runs in process against a real service on 127.0.0.1. The 413 is the
service's own (``--max-body-bytes``); the 500 is injected by a transport that
forwards everything else to the real service. Each run that cannot record its
end exits 1 with one ``zuke: could not record run …`` line; a record is
``degraded`` (and not ``succeeded``) where any write could still land.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import CliRunner
from tests.engine.record_support import record_failure_line, the_record
from tests.serve.support import TOKEN, ServerProcess, running_server
from zuke import Build, Context, StateStore, target
from zuke._engine import writer as writer_module
from zuke.state.http import HttpStateStore

BIG = "x" * 8000  # over the service's 4 KB limit once it rides in a write


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writer_module, "BACKOFF_S", (0.0, 0.0, 0.0))


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    with running_server(tmp_path, args=["--max-body-bytes", "4096"]) as server:
        yield server


@pytest.fixture
def stores() -> Iterator[list[HttpStateStore]]:
    """Stores a test opens, closed after it (their connection pools)."""
    opened: list[HttpStateStore] = []
    yield opened
    for store in opened:
        store.close()


class FailingWrites(httpx.BaseTransport):
    """Forwards to the real service, but answers 500 to ``failures`` run writes once armed."""

    def __init__(self, failures: int) -> None:
        self.inner = httpx.HTTPTransport()
        self.failures = failures
        self.armed = False
        self.failed = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        writes = request.method in ("PATCH", "PUT") and request.url.path.startswith("/runs/")
        if self.armed and writes and self.failed < self.failures:
            self.failed += 1
            return httpx.Response(500, json={"error": "internal error"})
        return self.inner.handle_request(request)

    def close(self) -> None:
        self.inner.close()


def release_build(store: StateStore, body: Any) -> type[Build]:
    class Release(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def build(self, t: Any) -> Any:
            return t.executes(lambda: None)

        @target
        def publish(self, t: Any) -> Any:
            return t.depends_on(self.build).executes(body)

    return Release


def test_a_413_for_the_runs_writes_marks_the_record_degraded_and_exits_1(
    server: ServerProcess, cli: CliRunner, stores: list[HttpStateStore]
) -> None:
    store = HttpStateStore(server.url, token=TOKEN)
    stores.append(store)

    def publish(ctx: Context) -> None:
        ctx.state.set({"changelog": BIG})  # every later write of its row is too large

    result = cli("publish", build=release_build(store, publish))
    line = record_failure_line(result)
    assert "HTTP 413" in line
    assert server.url in line
    assert "the record is left failed and marked degraded" in line
    record = the_record(store)
    assert (record.status, record.degraded) == ("failed", True)  # never "succeeded"
    assert record.targets["publish"].status != "succeeded"
    assert "could not be recorded" in (record.events[-1].detail or "")
    assert TOKEN not in result.text


def test_a_500_that_passes_is_retried_and_the_run_is_recorded(
    server: ServerProcess, cli: CliRunner, stores: list[HttpStateStore]
) -> None:
    transport = FailingWrites(failures=2)
    store = HttpStateStore(server.url, token=TOKEN, transport=transport)
    stores.append(store)

    def publish() -> None:
        transport.armed = True

    result = cli("publish", build=release_build(store, publish))
    assert result.code == 0, result.text
    assert transport.failed == 2
    record = the_record(store)
    assert (record.status, record.degraded) == ("succeeded", False)
    assert {n: t.status for n, t in record.targets.items()} == {
        "build": "succeeded",
        "publish": "succeeded",
    }


def test_a_500_that_lasts_exits_1_and_leaves_the_record_running(
    server: ServerProcess, cli: CliRunner, stores: list[HttpStateStore]
) -> None:
    transport = FailingWrites(failures=1000)
    store = HttpStateStore(server.url, token=TOKEN, transport=transport)
    stores.append(store)

    def publish() -> None:
        transport.armed = True

    result = cli("publish", build=release_build(store, publish))
    line = record_failure_line(result)
    assert "failed with HTTP 500" in line
    assert "the record is left running and could not be marked degraded" in line
    record = the_record(store)
    assert record.status == "running"
    assert record.targets["publish"].status in ("pending", "running")
