"""``zuke serve --db postgresql://…``: one replica against two, on one database (issue 18).

Run it with the project's interpreter (Postgres binaries and ``zuke[postgres]`` needed)::

    .venv/bin/python benchmarks/bench_serve_replicas.py            # markdown
    .venv/bin/python benchmarks/bench_serve_replicas.py --json     # machine-readable

It starts a throwaway cluster (``tests/pg_support.py``: loopback, trust
authentication, ``fsync=off``), a fresh database, and two real ``zuke serve
--db postgresql://…`` processes on it (stopped with SIGTERM, exit 0
checked). Each figure is the median of ``--rounds`` after an untimed warm-up:

- **cas**: ``--writers`` (50) clients, each on its own keep-alive connection
  and its own run, do ``--writes`` (40) compare-and-swap updates each
  (``PUT /runs/:id`` with ``If-Match``): all through replica A, then split
  evenly over A and B. Writes per second over the wall time; p50 / p99 of a
  write. The client is ``bench_serve.py``'s minimal asyncio HTTP/1.1 one.
- **race**: ``--racers`` (12) processes, each with an open connection to a
  replica (split over the two, or all on A), are released at once by one
  write to a shared pipe and acquire the same lock key. Exactly one must
  win; the time from the release until the winner's answer, and until every
  racer has its answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.pg_support
from _timing import BenchmarkError, dump_json, machine, machine_line
from _timing import zuke_command as zuke
from bench_serve import _cas as serve_cas

from tests.pg_support import start_cluster, unavailable
from zuke.testing.serve import listening_url

DEADLINE_S = 60.0

RACER = r"""
import json, os, sys, time
from zuke.state._protocol import LockAcquired
from zuke.state.http import HttpStateStore
from zuke.state.records import LockHolder

url, go_fd, index = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
store = HttpStateStore(url, token=os.environ["ZUKE_STATE_TOKEN"])
me = LockHolder(actor=f"racer-{index}", run_id=f"run-{index}", since="2026-05-01T00:00:00Z")
for line in sys.stdin:
    order = json.loads(line)
    if order.get("quit"):
        break
    store.list_locks(run_id="warm-up")
    print("armed", flush=True)
    os.read(go_fd, 1)
    won = isinstance(store.acquire_lock(order["key"], me, 60_000), LockAcquired)
    print(json.dumps({"won": won, "at": time.monotonic()}), flush=True)
store.close()
"""


@dataclass(frozen=True)
class Replica:
    url: str
    port: int
    proc: subprocess.Popen[bytes]


@contextmanager
def replica(db_url: str, token: str, log: Path, pool: int | None = None) -> Iterator[Replica]:
    """A ``zuke serve --db postgresql://…`` process; SIGTERM and exit 0 at the end."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    if pool is not None:
        env["ZUKE_PG_POOL_SIZE"] = str(pool)
    argv = [*zuke(), "serve", "--host", "127.0.0.1", "--port", "0", "--db", db_url]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            argv, env={**env, "ZUKE_SERVE_TOKEN": token}, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=stderr, bufsize=0,
        )  # fmt: skip
    try:
        url = listening_url(proc, deadline_s=DEADLINE_S)
        yield Replica(url=url, port=int(url.rsplit(":", 1)[1]), proc=proc)
    finally:
        proc.terminate()
        code = proc.wait(DEADLINE_S)
        if proc.stdout is not None:
            proc.stdout.close()
    if code != 0:
        raise BenchmarkError(f"zuke serve exited with {code}:\n{log.read_text()[-2000:]}")


async def _cas(ports: list[int], token: str, writers: int, writes: int) -> dict[str, float]:
    auth = {"Authorization": f"Bearer {token}"}
    return asdict(await serve_cas("127.0.0.1", ports, auth, writers, writes))


def cas(
    ports: list[int], token: str, *, writers: int, writes: int, rounds: int
) -> dict[str, object]:
    asyncio.run(_cas(ports, token, writers, 5))  # warm-up
    results = [asyncio.run(_cas(ports, token, writers, writes)) for _ in range(rounds)]
    return {
        "replicas": len(ports),
        "writers": writers,
        "writes_each": writes,
        "rounds": results,
        **{
            k: statistics.median(r[k] for r in results)
            for k in ("writes_per_s", "p50_ms", "p99_ms")
        },
    }


def _read_line(proc: subprocess.Popen[bytes], buffers: dict[int, bytes], deadline: float) -> str:
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in buffers.get(fd, b""):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise BenchmarkError("a racer went quiet")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise BenchmarkError(f"a racer exited with {proc.wait()}")
            buffers[fd] = buffers.get(fd, b"") + chunk
    line, _, buffers[fd] = buffers[fd].partition(b"\n")
    return line.decode()


def race(urls: list[str], token: str, *, racers: int, rounds: int) -> dict[str, object]:
    go_read, go_write = os.pipe()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, urls[i % len(urls)], str(go_read), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=(go_read,),
            env={**env, "ZUKE_STATE_TOKEN": token},
        )
        for i in range(racers)
    ]
    os.close(go_read)
    buffers: dict[int, bytes] = {}
    to_winner: list[float] = []
    to_all: list[float] = []
    try:
        for round_no in range(rounds + 1):  # the first is a warm-up
            order = json.dumps({"key": f"race-{uuid.uuid4().hex[:8]}"}).encode() + b"\n"
            deadline = time.monotonic() + DEADLINE_S
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(order)
                proc.stdin.flush()
            if [_read_line(p, buffers, deadline) for p in procs] != ["armed"] * racers:
                raise BenchmarkError("a racer did not arm")
            released = time.monotonic()
            os.write(go_write, b"x" * racers)
            answers = [json.loads(_read_line(p, buffers, deadline)) for p in procs]
            winners = [a for a in answers if a["won"]]
            if len(winners) != 1:
                raise BenchmarkError(f"{len(winners)} winners: {answers}")
            if round_no:
                to_winner.append((winners[0]["at"] - released) * 1000)
                to_all.append((max(a["at"] for a in answers) - released) * 1000)
    finally:
        os.close(go_write)
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(b'{"quit": true}\n')
                proc.stdin.close()
            except BrokenPipeError:
                pass
            proc.wait(DEADLINE_S)
            proc.stdout.close()
    return {
        "replicas": len(urls),
        "racers": racers,
        "rounds": rounds,
        "winner_ms": statistics.median(to_winner),
        "all_answered_ms": statistics.median(to_all),
    }


def markdown(results: dict[str, object]) -> str:
    rows = ["| measure | one replica | two replicas |", "| --- | ---: | ---: |"]
    one, two = results["cas_one"], results["cas_two"]
    r1, r2 = results["race_one"], results["race_two"]
    assert isinstance(one, dict) and isinstance(two, dict)
    assert isinstance(r1, dict) and isinstance(r2, dict)
    rows += [
        f"| CAS writes/s ({one['writers']} clients, distinct runs) "
        f"| {one['writes_per_s']:.0f} | **{two['writes_per_s']:.0f}** |",
        f"| CAS write p50 / p99 (ms) | {one['p50_ms']:.1f} / {one['p99_ms']:.1f} "
        f"| {two['p50_ms']:.1f} / {two['p99_ms']:.1f} |",
        f"| {r1['racers']}-process lock race: to the winner's answer (ms) "
        f"| {r1['winner_ms']:.1f} | **{r2['winner_ms']:.1f}** |",
        f"| {r1['racers']}-process lock race: to every answer (ms) "
        f"| {r1['all_answered_ms']:.1f} | {r2['all_answered_ms']:.1f} |",
        "",
        machine_line(),
    ]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--racers", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--race-rounds", type=int, default=20)
    parser.add_argument("--pool", type=int, help="ZUKE_PG_POOL_SIZE of each replica (16)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason is not None:
        raise SystemExit(f"bench_serve_replicas: {reason}")
    cluster = start_cluster()
    token = f"bench-{uuid.uuid4().hex}"
    try:
        db_url = cluster.create_database()
        with (
            tempfile.TemporaryDirectory(prefix="zuke-bench-replicas-") as tmp,
            ExitStack() as stack,
        ):
            logs = (Path(tmp) / f"{n}.log" for n in "ab")
            a, b = (stack.enter_context(replica(db_url, token, log, args.pool)) for log in logs)
            sizes = {"writers": args.writers, "writes": args.writes, "rounds": args.rounds}
            results: dict[str, object] = {
                "cas_one": cas([a.port], token, **sizes),
                "cas_two": cas([a.port, b.port], token, **sizes),
                "race_one": race([a.url], token, racers=args.racers, rounds=args.race_rounds),
                "race_two": race(
                    [a.url, b.url], token, racers=args.racers, rounds=args.race_rounds
                ),
            }
    finally:
        cluster.stop()
    payload = {"machine": machine(), **results}
    print(dump_json(payload) if args.json else markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
