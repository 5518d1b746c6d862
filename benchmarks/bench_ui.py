"""``zuke serve``'s web view: time to the first byte of its pages over 20,000 runs.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_ui.py                 # markdown
    .venv/bin/python benchmarks/bench_ui.py --json          # machine-readable
    .venv/bin/python benchmarks/bench_ui.py --db postgresql://zuke@127.0.0.1:5432/bench

A database is filled first, through the service's own database layer (the
calls ``zuke serve`` makes for ``PUT`` and ``PATCH``): ``--runs`` (default
20,000) runs of a 12-target release — most finished, 2 % suspended at an
approval gate with a deadline, 1 % running, 3 % failed, across 12 starters
and 3 builds — plus one suspended **1,000-target** run written the way a run
writes itself (its record, then a journal append per target, so a read folds
the journal) and one run with a **300-item** fan-out of 3 stages.

Then a real ``zuke serve`` process (``--port 0``, a token) serves it; the
benchmark signs in through the login form like a browser and asks each page
``--requests`` times (default 30, after 3 unmeasured) on one keep-alive
connection: the time from sending the request to the first byte of the
answer, and to its last. Medians, with min and max.

The goals (issue 27): the runs page ≤ 100 ms, a 1,000-target run's page ≤ 300 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import BenchmarkError, dump_json, machine, machine_line, zuke_command

from zuke._clock import SYSTEM_CLOCK, iso
from zuke._serve.db_choice import check_db, open_db
from zuke.state.records import (
    GraphNode,
    RunDelta,
    RunEvent,
    RunRecord,
    TargetRecord,
    WaitingFor,
)
from zuke.state.wire import record_to_json
from zuke.testing.serve import listening_url

RUNS_GOAL_S = 0.100
BIG_RUN_GOAL_S = 0.300
RELEASE = [
    "checkout",
    "lint",
    "unit",
    "build",
    "sign",
    "sbom",
    "stage",
    "smoke",
    "approve",
    "publish",
    "announce",
    "cleanup",
]
STARTERS = [f"dev{i:02d}" for i in range(12)]
BUILDS = ["Release", "Hotfix", "Nightly"]
DAY_MS = 86_400_000


def _chain(names: list[str]) -> tuple[GraphNode, ...]:
    return tuple(GraphNode(n, (names[i - 1],) if i else ()) for i, n in enumerate(names))


def release_record(i: int, now: int) -> RunRecord:
    created = now - (20_000 - i) * 60_000  # one a minute, the newest last
    status: Any = (
        "suspended"
        if i % 50 == 7
        else "running"
        if i % 100 == 3
        else "failed"
        if i % 33 == 5
        else "succeeded"
    )
    targets: dict[str, TargetRecord] = {}
    stop = {"suspended": 8, "running": 4, "failed": 6, "succeeded": 12}[status]
    for k, name in enumerate(RELEASE):
        start, end = iso(created + k * 1000), iso(created + k * 1000 + 900)
        if k < stop:
            targets[name] = TargetRecord(status="succeeded", started_at=start, ended_at=end)
        elif k == stop and status == "suspended":
            targets[name] = TargetRecord(
                status="waiting",
                started_at=start,
                waiting_for=WaitingFor(
                    trigger="github-approval:acme/app",
                    deadline=iso(created + DAY_MS),
                    checked_at=start,
                    detail="waiting for 2 approvals (1 so far)",
                ),
                meta={
                    "issueUrl": "https://github.com/acme/app/issues/12",
                    "approvers": [
                        {
                            "login": "alice",
                            "role": "maintain",
                            "at": start,
                            "url": "https://github.com/acme/app/issues/12#c1",
                        }
                    ],
                },
            )
        elif k == stop and status in ("running", "failed"):
            targets[name] = TargetRecord(
                status=status,
                started_at=start,
                ended_at=end if status == "failed" else None,
                error="exit 1: tests failed (after 2 attempts)" if status == "failed" else None,
            )
        else:
            targets[name] = TargetRecord()
    return RunRecord(
        id=f"run-{i:05d}-{uuid.UUID(int=i).hex[:8]}",
        build=BUILDS[i % 3],
        root_target="cleanup",
        status=status,
        actor=STARTERS[i % len(STARTERS)],
        created_at=iso(created),
        updated_at=iso(created + stop * 1000),
        graph=_chain(RELEASE),
        targets=targets,
        params={"version": f"1.{i // 100}.{i % 100}", "channel": "stable"},
        events=(RunEvent(at=iso(created), tool="run", actor="ci", args={"target": "cleanup"}),),
        parked_at=iso(created + stop * 1000) if status == "suspended" else None,
    )


def big_run(now: int, n: int = 1000) -> tuple[RunRecord, list[RunDelta]]:
    """A suspended n-target run: a layered graph, written as a record and n appends."""
    names = [f"t{k:04d}" for k in range(n)]
    graph = tuple(
        GraphNode(name, tuple(names[j] for j in {k - 1, k - 7, k - 31} if 0 <= j < k))
        for k, name in enumerate(names)
    )
    record = RunRecord(
        id="big-1000",
        build="Monorepo",
        root_target=names[-1],
        status="running",
        actor="dev00",
        created_at=iso(now - 3_600_000),
        updated_at=iso(now),
        graph=graph,
    )
    deltas = []
    for k, name in enumerate(names):
        at = iso(now - 3_600_000 + k * 1000)
        if k < n - 10:
            row = TargetRecord(status="succeeded", started_at=at, ended_at=at)
        elif k == n - 10:
            row = TargetRecord(
                status="waiting",
                started_at=at,
                waiting_for=WaitingFor(
                    trigger="signal:approved", deadline=iso(now + DAY_MS), checked_at=at
                ),
            )
        else:
            continue
        last = k == n - 10
        deltas.append(
            RunDelta(updated_at=at, targets={name: row}, status="suspended" if last else None)
        )
    return record, deltas


def fan_out_run(now: int, items: int = 300) -> RunRecord:
    graph = _chain(["prepare", "deploy_all", "verify"])
    targets = {
        "prepare": TargetRecord(status="succeeded", started_at=iso(now), ended_at=iso(now)),
        "deploy_all": TargetRecord(status="running", started_at=iso(now)),
    }
    for i in range(items):
        for s, stage in enumerate(("check", "deploy", "smoke")):
            status: Any = "succeeded" if i < 250 or s == 0 else "running" if s == 1 else "pending"
            targets[f"deploy_all[svc-{i:03d}].{stage}"] = TargetRecord(status=status)
    return RunRecord(
        id="fan-300",
        build="CD",
        root_target="verify",
        status="running",
        actor="dev01",
        created_at=iso(now - 60_000),
        updated_at=iso(now),
        graph=graph,
        targets=targets,
    )


def fill(db_spec: str, runs: int) -> None:
    """Write the runs through the service's own database calls."""
    db = open_db(check_db(db_spec), clock=SYSTEM_CLOCK, wait_s=30.0, connections=2)
    try:
        now = SYSTEM_CLOCK.now_ms()
        for i in range(runs):
            record = release_record(i, now)
            db.create_run("", record, json.dumps(record_to_json(record)))
        big, deltas = big_run(now)
        etag = db.create_run("", big, json.dumps(record_to_json(big)))
        assert etag is not None
        for delta in deltas:
            outcome, etag = db.patch_run("", big.id, delta, if_match=etag)
            assert outcome == "written", outcome
        fan = fan_out_run(now)
        db.create_run("", fan, json.dumps(record_to_json(fan)))
    finally:
        db.close()


@contextmanager
def serving(
    db_spec: str, workdir: Path, token: str
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    argv = [*zuke_command(), "serve", "--host", "127.0.0.1", "--port", "0", "--db", db_spec]
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    with (workdir / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            argv,
            env={**env, "ZUKE_SERVE_TOKEN": token},
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.DEVNULL,
            bufsize=0,
        )
    try:
        yield listening_url(proc, deadline_s=60.0), proc
    finally:
        proc.terminate()
        if proc.wait(timeout=60) != 0:
            raise BenchmarkError(f"zuke serve exited with {proc.returncode}")


class Client:
    """One keep-alive connection; times the first byte and the last of each answer."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host = parts.netloc
        self.sock = socket.create_connection((parts.hostname, parts.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cookies: dict[str, str] = {}

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes, float, float]:
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", f"Content-Length: {len(body)}"]
        if self.cookies:
            head.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        data = ("\r\n".join(head) + "\r\n\r\n").encode() + body
        start = time.perf_counter()
        self.sock.sendall(data)
        buf = self.sock.recv(65536)
        first = time.perf_counter() - start
        while b"\r\n\r\n" not in buf:
            buf += self.sock.recv(65536)
        raw_head, _, rest = buf.partition(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        got: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            got[name.strip().lower()] = value.strip()
            if name.strip().lower() == "set-cookie":
                k, _, v = value.strip().split(";")[0].partition("=")
                self.cookies[k] = v
        length = int(got.get("content-length", "0"))
        while len(rest) < length:
            rest += self.sock.recv(1 << 20)
        return int(lines[0].split()[1]), got, rest, first, time.perf_counter() - start

    def login(self, token: str) -> None:
        _, _, page, _, _ = self.request("GET", "/ui/login")
        value = re.search(rb'name="form" value="([^"]+)"', page)
        assert value is not None, page[:500]
        form = urlencode({"form": value.group(1).decode(), "token": token, "next": "/ui/"})
        status, _, _, _, _ = self.request(
            "POST",
            "/ui/login",
            form.encode(),
            {"Content-Type": "application/x-www-form-urlencoded", "Origin": f"http://{self.host}"},
        )
        if status != 303:
            raise BenchmarkError(f"login answered {status}")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process ``pid`` has used (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(client: Client, path: str, warm: int, runs: int, pid: int) -> dict[str, Any]:
    firsts, totals, size = [], [], 0
    cpu_before = 0.0
    for n in range(warm + runs):
        if n == warm:
            cpu_before = cpu_s(pid)
        status, _, body, first, total = client.request("GET", path)
        if status != 200:
            raise BenchmarkError(f"GET {path} answered {status}: {body[:300]!r}")
        if n >= warm:
            firsts.append(first)
            totals.append(total)
            size = len(body)
    server_cpu = (cpu_s(pid) - cpu_before) / runs
    return {
        "path": path,
        "first_byte_median_s": statistics.median(firsts),
        "first_byte_min_s": min(firsts),
        "first_byte_max_s": max(firsts),
        "total_median_s": statistics.median(totals),
        "bytes": size,
        "server_cpu_s": server_cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--db", help="postgresql://… (an empty database); default a SQLite file")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-ui-") as tmp:
        workdir = Path(tmp)
        db_spec = args.db or str(workdir / "state.db")
        started = time.perf_counter()
        fill(db_spec, args.runs)
        filled_s = time.perf_counter() - started
        token = f"bench-{uuid.uuid4().hex}"
        with serving(db_spec, workdir, token) as (url, proc):
            client = Client(url)
            client.login(token)
            _, _, first_page, _, _ = client.request("GET", "/ui/")
            older = re.search(rb'href="(/ui/\?before=[^"]+)"', first_page)
            pages = [
                ("runs page (newest 50)", "/ui/"),
                ("runs page, status=suspended", "/ui/?status=suspended"),
                ("runs page, starter=dev03", "/ui/?starter=dev03"),
                ("runs page, since=7d, build=Hotfix", "/ui/?since=7d&build=Hotfix"),
                (
                    "runs page, the second page",
                    older.group(1).decode().replace("&amp;", "&") if older else "/ui/",
                ),
                ("a 1,000-target run (suspended, journal folded)", "/ui/runs/big-1000"),
                ("a run with a 300-item fan-out", "/ui/runs/fan-300"),
                ("a 12-target run", f"/ui/runs/{release_record(7, 0).id}"),
                ("locks page", "/ui/locks"),
            ]
            results = [
                {"name": name, **measure(client, path, 3, args.requests, proc.pid)}
                for name, path in pages
            ]
    report = {
        "runs": args.runs,
        "backend": "postgres" if args.db else "sqlite",
        "fill_s": filled_s,
        "results": results,
        "machine": machine(),
    }
    if args.json:
        print(dump_json(report))
        return 0
    print(
        f"{args.runs} runs on {report['backend']} (filled in {filled_s:.0f} s); "
        f"median of {args.requests} after 3 unmeasured\n"
    )
    print("| page | first byte (median) | min / max | whole answer | server CPU | size |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for r in results:
        print(
            f"| {r['name']} | {r['first_byte_median_s'] * 1000:.1f} ms | "
            f"{r['first_byte_min_s'] * 1000:.1f} / {r['first_byte_max_s'] * 1000:.1f} ms | "
            f"{r['total_median_s'] * 1000:.1f} ms | {r['server_cpu_s'] * 1000:.1f} ms | "
            f"{r['bytes'] / 1024:.0f} KiB |"
        )
    print(f"\n{machine_line()}")
    runs_ok = results[0]["first_byte_median_s"] <= RUNS_GOAL_S
    big_ok = results[5]["first_byte_median_s"] <= BIG_RUN_GOAL_S
    print(
        f"goals: runs page ≤ 100 ms {'met' if runs_ok else 'NOT met'}; "
        f"1,000-target run ≤ 300 ms {'met' if big_ok else 'NOT met'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
