"""Compare-and-swap across real processes on one FileSystemStateStore directory.

Eight worker processes are started once and driven over their stdin/stdout
for twenty rounds. In each round the parent creates a fresh run; every worker
reads its version and answers ``ready``; only when all eight are ready does the
parent send ``go`` to each, so the writes start together (the workers are
blocked in a read, not sleeping). Exactly one write per round may land; the
same holds for acquiring a free lock — on the filesystem store, and on
Postgres (the workers name a fresh database's URL). The listing index, which every one of
those writes updates (an actor change is a listed field), must agree with the
journals afterwards, and processes creating and finishing runs side by side
must lose none of them from it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.pg_support import PgCluster
from zuke.state._protocol import LockHeld, RunQuery, StateStore, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.postgres import PostgresStateStore
from zuke.testing.store_contract import sample_holder, sample_record

pytestmark = pytest.mark.e2e

WORKERS = 8
ROUNDS = 20
#: rounds on Postgres (put, append and a lock each)
PG_ROUNDS = 10

_WORKER = textwrap.dedent(
    """
    import sys
    from dataclasses import replace
    from zuke.state.filesystem import FileSystemStateStore
    from zuke.state._protocol import LockHolder
    from zuke.state.records import RunDelta

    directory, me = sys.argv[1], sys.argv[2]
    if directory.startswith("postgresql://"):
        from zuke.state.postgres import PostgresStateStore
        store = PostgresStateStore(directory)
    else:
        store = FileSystemStateStore(directory, mutex_timeout_s=30)
    for command in sys.stdin:
        op, run_id = command.split()
        stored = store.get_run(run_id)
        print("ready", flush=True)
        assert sys.stdin.readline().strip() == "go"
        if op == "lock":
            holder = LockHolder(actor=me, run_id=run_id, since="2026-01-02T00:00:00.000Z")
            result = store.acquire_lock(run_id, holder, 3_600_000)
        elif op == "put":
            mine = replace(stored.record, actor=me)
            result = store.put_run(mine, expected_version=stored.version)
        else:
            delta = RunDelta(updated_at="2026-01-02T00:00:00.000Z", actor=me)
            result = store.append_run(run_id, delta, expected_version=stored.version)
        print(type(result).__name__, flush=True)
    """
)


class Workers:
    def __init__(self, directory: Path | str) -> None:
        """Workers on the filesystem store at ``directory``, or on a ``postgresql://`` URL."""
        self.procs = [
            subprocess.Popen(
                [sys.executable, "-c", _WORKER, str(directory), f"worker-{i}"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                bufsize=1,
            )
            for i in range(WORKERS)
        ]

    def _read(self, proc: subprocess.Popen[str]) -> str:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line, f"worker {proc.pid} exited (code {proc.poll()})"
        return line

    def _send(self, proc: subprocess.Popen[str], line: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(line + "\n")
        proc.stdin.flush()

    def race(self, op: str, run_id: str) -> list[str]:
        for proc in self.procs:
            self._send(proc, f"{op} {run_id}")
        assert [self._read(p) for p in self.procs] == ["ready"] * WORKERS
        for proc in self.procs:  # the barrier: nobody writes until all have read
            self._send(proc, "go")
        return [self._read(p) for p in self.procs]

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in self.procs:
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def workers(directory: Path) -> Iterator[Workers]:
    pool = Workers(directory)
    try:
        yield pool
    finally:
        pool.close()
    assert [p.returncode for p in pool.procs] == [0] * WORKERS


def race_for_a_run(store: StateStore, workers: Workers, op: str, run_id: str) -> None:
    """A fresh run, every worker writing it at its first version: one winner, whose write
    is the one stored."""
    assert isinstance(store.create_run(sample_record(run_id)), Written)
    results = workers.race(op, run_id)
    assert sorted(results) == ["Conflict"] * (WORKERS - 1) + ["Written"], (run_id, results)
    stored = store.get_run(run_id)
    assert stored is not None
    assert stored.record.actor == f"worker-{results.index('Written')}", (run_id, results)


def race_for_a_lock(store: StateStore, workers: Workers, key: str) -> None:
    """Every worker acquiring a free lock: one winner, who holds it afterwards."""
    results = workers.race("lock", key)
    assert sorted(results) == ["LockAcquired"] + ["LockHeld"] * (WORKERS - 1), results
    held = store.acquire_lock(key, sample_holder(), 1000)
    assert isinstance(held, LockHeld)
    assert held.holder.actor == f"worker-{results.index('LockAcquired')}"


@pytest.mark.parametrize("op", ["put", "append"])
def test_racing_processes_at_one_version_have_exactly_one_winner(
    op: str, directory: Path, workers: Workers
) -> None:
    store = FileSystemStateStore(directory)
    for round_ in range(ROUNDS):
        race_for_a_run(store, workers, op, f"race-{op}-{round_}")
    listed = {s.id: s for s in store.list_runs()}
    assert listed == {r.id: r.summary() for r in store.scan()}
    assert len(listed) == ROUNDS


def test_racing_processes_for_a_free_lock_have_exactly_one_winner(
    directory: Path, workers: Workers
) -> None:
    store = FileSystemStateStore(directory)
    for round_ in range(ROUNDS):
        race_for_a_lock(store, workers, f"race-lock-{round_}")


def test_racing_processes_on_postgres_have_exactly_one_winner(pg_cluster: PgCluster) -> None:
    url = pg_cluster.create_database()
    store = PostgresStateStore(url)
    pool = Workers(url)
    try:
        for round_ in range(PG_ROUNDS):
            for op in ("put", "append"):
                race_for_a_run(store, pool, op, f"race-{op}-{round_}")
            race_for_a_lock(store, pool, f"race-lock-{round_}")
        assert len(store.list_runs()) == 2 * PG_ROUNDS
    finally:
        pool.close()
        store.close()
    assert [p.returncode for p in pool.procs] == [0] * WORKERS


_CREATOR = textwrap.dedent(
    """
    import sys
    from zuke.state.filesystem import FileSystemStateStore
    from zuke.state.records import RunDelta
    from zuke.testing.store_contract import sample_record

    directory, me, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = FileSystemStateStore(directory, mutex_timeout_s=30)
    assert sys.stdin.readline().strip() == "go"
    for i in range(count):
        run_id = f"{me}-{i}"
        stamp = f"2026-01-02T00:00:{i:02d}.000Z"
        created = store.create_run(sample_record(run_id, created_at=stamp))
        status = "suspended" if i % 2 else "succeeded"
        delta = RunDelta(updated_at="2026-01-03T00:00:00.000Z", status=status)
        result = store.append_run(run_id, delta, expected_version=created.version)
        assert type(result).__name__ == "Written", result
    print("done", flush=True)
    """
)


def test_processes_creating_and_finishing_runs_side_by_side_lose_none_from_the_listing(
    directory: Path,
) -> None:
    count = 25
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CREATOR, str(directory), f"p{i}", str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(WORKERS)
    ]
    for proc in procs:  # all started (imports done or not): let them go together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [p.returncode for p in procs] == [0] * WORKERS, outputs
    store = FileSystemStateStore(directory)
    assert store.index.dirty() == []
    suspended = store.list_runs(RunQuery(status="suspended"))
    assert len(suspended) == WORKERS * (count // 2)
    assert len(store.list_runs()) == WORKERS * count
    assert {s.id: s for s in store.list_runs()} == {r.id: r.summary() for r in store.scan()}
