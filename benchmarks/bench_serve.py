"""``zuke serve`` under load: many clients at once, and compare-and-swap throughput.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_serve.py            # markdown
    .venv/bin/python benchmarks/bench_serve.py --json     # machine-readable

Against a real ``zuke serve --host 127.0.0.1 --port 0`` on a fresh SQLite
database (started for the benchmark, stopped with SIGTERM, exit 0 checked),
with a minimal asyncio HTTP/1.1 client in this process so the client's own
cost stays small next to the server's:

- **burst**: ``--clients`` (default 200) clients open a connection each and
  send one ``GET /runs/:id`` at the same moment (a record of ~10 kB); per
  client, the time from starting to connect until the whole answer is read.
  ``--rounds`` rounds (default 5); per round the p50, p99 and max, then the
  median of the rounds' figures.
- **cas**: ``--writers`` (default 50) clients, each on its own keep-alive
  connection and its own run, do ``--writes`` (default 40) compare-and-swap
  updates each (``PUT /runs/:id`` with ``If-Match`` of the ETag it got last);
  the throughput is all successful writes over the wall time, median of the
  rounds, and the latency of a write p50 / p99.

The 1000-target chain against ``zuke serve`` is ``bench_state.py``'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Importable both as a script (`python benchmarks/bench_serve.py`) and as a module.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import BenchmarkError, dump_json, machine
from bench_state import Server, child_env, zuke_serve

from zuke.state.records import GraphNode, RunRecord, TargetRecord
from zuke.state.wire import record_to_json

#: The goal from the serve issue: 200 clients at once, one GET each.
BURST_P99_GOAL_S = 0.5
#: A burst client that has no answer after this long counts as failed.
CLIENT_TIMEOUT_S = 30.0


def _percentile(samples: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(samples)
    return ordered[max(0, min(len(ordered) - 1, round(q * len(ordered)) - 1))]


class Connection:
    """One keep-alive HTTP/1.1 connection speaking just enough of the protocol."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, host: str, port: int) -> Connection:
        reader, writer = await asyncio.open_connection(host, port)
        return cls(reader, writer)

    async def request(
        self, method: str, path: str, headers: dict[str, str], body: bytes = b""
    ) -> tuple[int, dict[str, str], bytes]:
        lines = [f"{method} {path} HTTP/1.1", "Host: bench"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        lines.append(f"Content-Length: {len(body)}")
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        got = {}
        for line in header_lines:
            if ":" in line:
                name, _, value = line.partition(":")
                got[name.strip().lower()] = value.strip()
        content = await self.reader.readexactly(int(got.get("content-length", "0")))
        return int(status_line.split()[1]), got, content

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


def sample_record(run_id: str) -> RunRecord:
    return RunRecord(
        id=run_id,
        build="Bench",
        root_target="t049",
        status="running",
        actor="bench",
        created_at="2026-05-01T00:00:00.000Z",
        updated_at="2026-05-01T00:00:00.000Z",
        graph=tuple(GraphNode(f"t{i:03d}") for i in range(50)),
        targets={f"t{i:03d}": TargetRecord(status="succeeded") for i in range(50)},
    )


@dataclass(frozen=True)
class Burst:
    p50: float
    p99: float
    max: float
    failed: int  #: clients refused, reset or unanswered in 30 s (their time is not counted)


@dataclass(frozen=True)
class Cas:
    writes_per_s: float
    p50_ms: float
    p99_ms: float


async def _burst(host: str, port: int, auth: dict[str, str], clients: int) -> Burst:
    go = asyncio.Event()

    async def one(i: int) -> float | None:
        await go.wait()
        start = time.perf_counter()
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT_S):
                conn = await Connection.open(host, port)
                status, _, _ = await conn.request("GET", f"/runs/burst-{i % 10}", auth)
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return None
        elapsed = time.perf_counter() - start
        await conn.close()
        if status != 200:
            raise BenchmarkError(f"burst GET answered {status}")
        return elapsed

    tasks = [asyncio.create_task(one(i)) for i in range(clients)]
    await asyncio.sleep(0)  # every task is waiting on the event
    go.set()
    results = await asyncio.gather(*tasks)
    times = [t for t in results if t is not None] or [float("nan")]
    return Burst(
        p50=_percentile(times, 0.5),
        p99=_percentile(times, 0.99),
        max=max(times),
        failed=len(results) - len(times),
    )


async def _cas(host: str, ports: list[int], auth: dict[str, str], writers: int, writes: int) -> Cas:
    """Writer ``i`` goes to ``ports[i % len(ports)]``: one replica, or several in turn."""
    latencies: list[float] = []
    created: list[int] = []
    all_created, go = asyncio.Event(), asyncio.Event()

    async def writer(i: int) -> None:
        run_id = f"cas-{i}-{time.monotonic_ns()}"
        body = json.dumps(record_to_json(sample_record(run_id))).encode()
        conn = await Connection.open(host, ports[i % len(ports)])
        status, headers, _ = await conn.request(
            "PUT", f"/runs/{run_id}", {**auth, "If-None-Match": "*"}, body
        )
        if status != 201:
            raise BenchmarkError(f"create answered {status}")
        etag = headers["etag"]
        created.append(i)
        if len(created) == writers:
            all_created.set()
        await go.wait()
        for _ in range(writes):
            start = time.perf_counter()
            status, headers, _ = await conn.request(
                "PUT", f"/runs/{run_id}", {**auth, "If-Match": etag}, body
            )
            latencies.append(time.perf_counter() - start)
            if status != 200:
                raise BenchmarkError(f"CAS write answered {status}")
            etag = headers["etag"]
        await conn.close()

    tasks = [asyncio.create_task(writer(i)) for i in range(writers)]
    await all_created.wait()  # every writer has its run and its connection
    start = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    return Cas(
        writes_per_s=writers * writes / wall,
        p50_ms=_percentile(latencies, 0.5) * 1000,
        p99_ms=_percentile(latencies, 0.99) * 1000,
    )


def run(
    server: Server, *, clients: int, rounds: int, writers: int, writes: int
) -> dict[str, object]:
    host, port = "127.0.0.1", int(server.url.rsplit(":", 1)[1])
    auth = {"Authorization": f"Bearer {server.token}"}

    async def setup() -> None:
        conn = await Connection.open(host, port)
        for i in range(10):
            body = json.dumps(record_to_json(sample_record(f"burst-{i}"))).encode()
            status, _, _ = await conn.request(
                "PUT", f"/runs/burst-{i}", {**auth, "If-None-Match": "*"}, body
            )
            if status != 201:
                raise BenchmarkError(f"setup answered {status}")
        await conn.close()

    asyncio.run(setup())
    asyncio.run(_burst(host, port, auth, clients))  # warm-up
    bursts = [asyncio.run(_burst(host, port, auth, clients)) for _ in range(rounds)]
    asyncio.run(_cas(host, [port], auth, writers, 5))  # warm-up
    cas = [asyncio.run(_cas(host, [port], auth, writers, writes)) for _ in range(rounds)]
    return {
        "burst": {
            "clients": clients,
            "rounds": [vars(b) for b in bursts],
            "p50_s": statistics.median(b.p50 for b in bursts),
            "p99_s": statistics.median(b.p99 for b in bursts),
            "max_s": statistics.median(b.max for b in bursts),
            "worst_p99_s": max(b.p99 for b in bursts),
            "failed": sum(b.failed for b in bursts),
        },
        "cas": {
            "writers": writers,
            "writes_each": writes,
            "rounds": [vars(c) for c in cas],
            "writes_per_s": statistics.median(c.writes_per_s for c in cas),
            "p50_ms": statistics.median(c.p50_ms for c in cas),
            "p99_ms": statistics.median(c.p99_ms for c in cas),
        },
    }


def markdown(results: dict[str, object]) -> str:
    burst = results["burst"]
    cas = results["cas"]
    assert isinstance(burst, dict) and isinstance(cas, dict)
    met = burst["p99_s"] < BURST_P99_GOAL_S and burst["failed"] == 0
    goal = "met" if met else "NOT met"
    return "\n".join(
        [
            f"{burst['clients']} clients, one GET each, at once ({len(burst['rounds'])} rounds):",
            "",
            "| p50 (s) | p99 (s) | max (s) | worst round's p99 (s) | failed |",
            "| ---: | ---: | ---: | ---: | ---: |",
            f"| {burst['p50_s']:.3f} | **{burst['p99_s']:.3f}** | {burst['max_s']:.3f} "
            f"| {burst['worst_p99_s']:.3f} | {burst['failed']} |",
            "",
            f"p99 under {BURST_P99_GOAL_S} s: **{goal}**.",
            "",
            f"{cas['writers']} clients, {cas['writes_each']} compare-and-swap writes each "
            f"on distinct runs ({len(cas['rounds'])} rounds):",
            "",
            "| writes/s | write p50 (ms) | write p99 (ms) |",
            "| ---: | ---: | ---: |",
            f"| **{cas['writes_per_s']:.0f}** | {cas['p50_ms']:.2f} | {cas['p99_ms']:.2f} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--writers", type=int, default=50)
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="zuke-bench-serve-") as tmp:
        root = Path(tmp)
        with zuke_serve(root, child_env(root)) as server:
            results = run(
                server, clients=args.clients, rounds=args.rounds,
                writers=args.writers, writes=args.writes,
            )  # fmt: skip
    payload = {"machine": machine(), **results}
    print(dump_json(payload) if args.json else markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
