"""Two real ``zuke serve --db postgresql://…`` processes on one database (issue 18).

* **A lock race through both replicas has exactly one winner.** Twelve racer
  processes, split over the two replicas, arm themselves (connection open),
  block on one shared pipe, and are released by a single write — a barrier,
  not a sleep. Each round exactly one acquisition is granted and every other
  racer is told the winner's holder. Ten rounds, fresh keys.
* **``kill -9`` of one replica mid-stream loses no acknowledged write.**
  Writer threads create runs and append to them through replica A as fast as
  it answers; once enough writes are acknowledged, A is killed with SIGKILL
  while writes are in flight. Every write A acknowledged (a 2xx) is then in
  the database — read through replica B and by the direct store — and B goes
  on serving writes, reads and locks.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.racer_support import Lines, race_round, racer_processes
from tests.e2e.support import wait_until
from tests.pg_support import PgCluster
from tests.serve.support import TOKEN, ServerProcess, start_server
from zuke._errors import ZukeError
from zuke.state._protocol import LockAcquired, LockHeld, Written
from zuke.state.http import HttpStateStore
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import LockHolder, RunDelta, RunRecord

pytestmark = pytest.mark.e2e

RACERS = 12
ROUNDS = 10
WRITERS = 4
ACKED_BEFORE_KILL = 40
DEADLINE_S = 30.0
PASSWORD = f"pw-{uuid.uuid4().hex}"

RACER = r"""
import json, os, sys
from zuke.state._protocol import LockAcquired
from zuke.state.http import HttpStateStore
from zuke.state.records import LockHolder

url, go_fd, index = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = HttpStateStore(url, token=os.environ["ZUKE_STATE_TOKEN"])
me = LockHolder(actor=f"racer-{index}", run_id=f"run-{index}", since="2026-04-01T00:00:00Z")
for line in sys.stdin:
    order = json.loads(line)
    if order.get("quit"):
        break
    store.list_locks(run_id="warm-up")  # the connection is open before the barrier
    print("armed", flush=True)
    assert os.read(go_fd, 1) == b"x"
    result = store.acquire_lock(order["key"], me, 60_000)
    won = isinstance(result, LockAcquired)
    print(json.dumps({"won": won, "holder": None if won else result.holder.actor}), flush=True)
store.close()
"""


@pytest.fixture
def two_replicas(
    pg_cluster: PgCluster, tmp_path: Path
) -> Iterator[tuple[str, list[ServerProcess]]]:
    url = pg_cluster.create_database()
    # The cluster trusts loopback, so any password connects: it must never be printed.
    with_password = url.replace("postgresql://zuke@", f"postgresql://zuke:{PASSWORD}@", 1)
    servers = [start_server(tmp_path, db=with_password) for _ in range(2)]
    try:
        yield url, servers
    finally:
        for server in servers:
            server.terminate()
            assert "Traceback" not in server.stderr(), server.stderr()
            assert PASSWORD not in server.stderr() + server.url
            assert PASSWORD.encode() not in server.more_stdout


def record(run_id: str) -> RunRecord:
    return RunRecord(
        id=run_id, build="Replicas", root_target="deploy", status="running", actor="writer",
        created_at="2026-04-01T00:00:00.000Z", updated_at="2026-04-01T00:00:00.000Z",
    )  # fmt: skip


def test_a_lock_race_of_twelve_processes_through_two_replicas_has_one_winner(
    two_replicas: tuple[str, list[ServerProcess]],
) -> None:
    _, servers = two_replicas
    with racer_processes(RACER, [s.url for s in servers], RACERS) as (go_write, procs):
        lines = [Lines(p) for p in procs]
        for round_no in range(ROUNDS):
            key = f"release-{round_no}-{uuid.uuid4().hex[:8]}"
            results = race_round(procs, lines, go_write, {"key": key})

            winners = [i for i, r in enumerate(results) if r["won"]]
            assert len(winners) == 1, f"round {round_no}: {results}"
            told = {r["holder"] for r in results if not r["won"]}
            assert told == {f"racer-{winners[0]}"}, f"round {round_no}: {results}"
            with HttpStateStore(servers[round_no % 2].url, token=TOKEN) as check:
                listed = [e for e in check.list_locks() if e.key == key]
                assert [e.holder.actor for e in listed] == [f"racer-{winners[0]}"]


class _Writer(threading.Thread):
    """Creates runs and appends to each through one replica until a write fails."""

    def __init__(self, url: str, index: int, acked: list[tuple[str, str]]) -> None:
        super().__init__(daemon=True)
        self._url, self._index, self._acked = url, index, acked
        self.failed: BaseException | None = None

    def run(self) -> None:
        store = HttpStateStore(self._url, token=TOKEN)
        try:
            n = 0
            while True:
                run_id = f"w{self._index}-{n}"
                created = store.create_run(record(run_id))
                assert isinstance(created, Written)
                self._acked.append((run_id, "writer"))  # list.append is atomic
                delta = RunDelta(updated_at="2026-04-01T00:00:01.000Z", actor=f"appended-{n}")
                appended = store.append_run(run_id, delta, expected_version=created.version)
                assert isinstance(appended, Written)
                self._acked.append((run_id, f"appended-{n}"))
                n += 1
        except (ZukeError, OSError) as exc:  # the replica is gone
            self.failed = exc
        finally:
            store.close()


def test_kill_9_of_one_replica_mid_stream_loses_no_acknowledged_write(
    two_replicas: tuple[str, list[ServerProcess]],
) -> None:
    url, (a, b) = two_replicas
    acked: list[tuple[str, str]] = []
    writers = [_Writer(a.url, i, acked) for i in range(WRITERS)]
    for writer in writers:
        writer.start()
    wait_until(
        lambda: len(acked) >= ACKED_BEFORE_KILL or not all(w.is_alive() for w in writers),
        f"{ACKED_BEFORE_KILL} acknowledged writes",
    )
    assert all(w.is_alive() for w in writers), [w.failed for w in writers]
    a.proc.kill()  # SIGKILL, writes in flight
    assert a.proc.wait(timeout=DEADLINE_S) == -9
    for writer in writers:
        writer.join(DEADLINE_S)
        assert not writer.is_alive() and writer.failed is not None
    final = dict(acked)  # the last acknowledged actor of each run
    assert len(final) >= ACKED_BEFORE_KILL // 2

    direct = PostgresStateStore(url)
    try:
        for run_id, actor in final.items():
            stored = direct.get_run(run_id)
            assert stored is not None, f"acknowledged run {run_id} is not in the database"
            if actor != "writer":
                assert stored.record.actor == actor, f"acknowledged append to {run_id} lost"
    finally:
        direct.close()

    with HttpStateStore(b.url, token=TOKEN) as survivor:
        for run_id, actor in final.items():
            seen = survivor.get_run(run_id)
            assert seen is not None and (actor == "writer" or seen.record.actor == actor)
        after = f"after-kill-{uuid.uuid4().hex[:8]}"
        assert isinstance(survivor.create_run(record(after)), Written)
        holder = LockHolder(actor="survivor", run_id=after, since="2026-04-01T00:00:00Z")
        assert isinstance(survivor.acquire_lock(f"k-{after}", holder, 60_000), LockAcquired)
        assert isinstance(survivor.acquire_lock(f"k-{after}", holder, 60_000), LockHeld)
        assert {s.id for s in survivor.list_runs()} >= {*final, after}
