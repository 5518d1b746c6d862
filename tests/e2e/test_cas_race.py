"""Compare-and-swap across real processes on one FileSystemStateStore directory.

Eight worker processes are started once and driven over their stdin/stdout
for twenty rounds. In each round the parent creates a fresh run; every worker
reads its version and answers ``ready``; only when all eight are ready does the
parent send ``go`` to each, so the writes start together (the workers are
blocked in a read, not sleeping). Exactly one write per round may land; the
same holds for acquiring a free lock.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from zuke.state._protocol import LockHeld, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.testing.store_contract import sample_holder, sample_record

pytestmark = pytest.mark.e2e

WORKERS = 8
ROUNDS = 20

_WORKER = textwrap.dedent(
    """
    import sys
    from dataclasses import replace
    from zuke.state.filesystem import FileSystemStateStore
    from zuke.state._protocol import LockHolder
    from zuke.state.records import RunDelta

    directory, me = sys.argv[1], sys.argv[2]
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
    def __init__(self, directory: Path) -> None:
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


@pytest.mark.parametrize("op", ["put", "append"])
def test_racing_processes_at_one_version_have_exactly_one_winner(
    op: str, directory: Path, workers: Workers
) -> None:
    store = FileSystemStateStore(directory)
    for round_ in range(ROUNDS):
        run_id = f"race-{op}-{round_}"
        assert isinstance(store.create_run(sample_record(run_id)), Written)
        results = workers.race(op, run_id)
        assert sorted(results) == ["Conflict"] * (WORKERS - 1) + ["Written"], (round_, results)
        winner = f"worker-{results.index('Written')}"
        stored = store.get_run(run_id)
        assert stored is not None
        assert stored.record.actor == winner, (round_, results)


def test_racing_processes_for_a_free_lock_have_exactly_one_winner(
    directory: Path, workers: Workers
) -> None:
    store = FileSystemStateStore(directory)
    for round_ in range(ROUNDS):
        key = f"race-lock-{round_}"
        results = workers.race("lock", key)
        assert sorted(results) == ["LockAcquired"] + ["LockHeld"] * (WORKERS - 1), results
        held = store.acquire_lock(key, sample_holder(), 1000)
        assert isinstance(held, LockHeld)
        assert held.holder.actor == f"worker-{results.index('LockAcquired')}"
