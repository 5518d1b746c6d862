"""Wake-ups on Postgres (issue 28 §3): from a stored signal to the resumed run's next body.

Run it with the project's interpreter (Postgres binaries and ``zuke[postgres]`` needed)::

    .venv/bin/python benchmarks/bench_wakeup.py                      # markdown
    .venv/bin/python benchmarks/bench_wakeup.py --json
    .venv/bin/python benchmarks/bench_wakeup.py --dbos-python /path/to/venv/bin/python

It starts its own throwaway cluster (``tests/pg_support.py``) and measures,
each over ``--samples`` samples (p50, p90, p99, max), the variants interleaved
sample by sample so that they see the same load:

- **watcher**: ``zuke resume --check --watch`` runs (a fresh process, its own
  ``LISTEN``); a run waits at its signal gate; the signal is stored by another
  process (this one: the same read and append as ``zuke resume --signal``'s
  delivery), and the time is taken from just before the delivery to the first
  line of the next target's body, which the body writes with
  ``time.monotonic_ns()`` (the system's one monotonic clock, shared by the
  processes). Target: p99 ≤ 50 ms.
- **command**: ``zuke resume RUN --signal go`` as a whole command (a fresh
  process: start-up, delivery, the continuation), from before it is started
  to the next body. Target: ≤ 150 ms.
- **DBOS**: DBOS Transact's ``send`` → ``recv`` on the same server: a workflow
  waits in ``DBOS.recv`` in one process, another sends with ``DBOSClient``,
  from before the send to ``recv``'s return. It needs ``dbos`` in an
  interpreter of its own (``pip install dbos`` in a separate virtualenv:
  never in the project's), named by ``--dbos-python`` or
  ``ZUKE_BENCH_DBOS_PYTHON``; without one the row is left out, saying why.

Before each sample the run has parked and the watcher's sweep for the park
has ended; then a pause of 0.1 to 0.6 s (a signal comes some time after a park,
not all at one phase of the watcher's loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.pg_support
from _timing import BenchmarkError, dump_json, machine, machine_line
from _timing import zuke_command as zuke
from bench_engine import child_env

from tests.pg_support import PgCluster, start_cluster, unavailable
from zuke import Build, execute
from zuke._clock import SYSTEM_CLOCK
from zuke._loader import load_build_class
from zuke._redact import Redactor
from zuke.runs.signals import SignalDelivery, store_signal
from zuke.state.postgres import PostgresStateStore

CACHE_ROOT = Path(tempfile.gettempdir()) / "zuke-bench-wakeup"
DBOS_PYTHON_ENV = "ZUKE_BENCH_DBOS_PYTHON"
#: how long one sample may take before the benchmark gives up on it
SAMPLE_TIMEOUT_S = 30.0

BUILD = """
    import os
    import time

    from zuke import Build, external_signal, target


    def mark():
        with open(os.environ["ZUKE_BENCH_MARKS"], "a") as marks:
            marks.write(f"{time.monotonic_ns()}\\n")


    class Wake(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(external_signal("go")).timeout("1h"))

        @target
        def ship(self, t):
            return t.depends_on(self.approve).executes(mark)
"""

#: DBOS's side, run by its own interpreter: ``worker`` launches DBOS and runs workflows that
#: wait in ``recv``; for each it says ``ready <id>`` and prints ``got <monotonic ns>`` when
#: ``recv`` returned. ``send`` reads ``<id>`` lines and sends to each, printing ``sent <ns>``.
DBOS_SCRIPT = """
    import sys, time
    role, url = sys.argv[1], sys.argv[2]
    if role == "send":
        from dbos import DBOSClient
        client = DBOSClient(system_database_url=url)
        print("ready", flush=True)
        for line in sys.stdin:
            started = time.monotonic_ns()
            client.send(line.strip(), "go", "go")
            print("sent", started, flush=True)
        raise SystemExit(0)
    from dbos import DBOS
    DBOS(config={"name": "wakeup", "system_database_url": url, "log_level": "WARNING"})

    @DBOS.workflow()
    def waiter():
        DBOS.recv("go", timeout_seconds=60)
        print("got", time.monotonic_ns(), flush=True)

    DBOS.launch()
    for line in sys.stdin:
        handle = DBOS.start_workflow(waiter)
        time.sleep(0.3)  # in recv by then
        print("ready", handle.workflow_id, flush=True)
        handle.get_result()
    DBOS.destroy()
"""


@dataclass(frozen=True)
class Row:
    name: str
    how: str
    samples_ms: tuple[float, ...]
    target: str = ""

    def pct(self, p: float) -> float:
        ordered = sorted(self.samples_ms)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


class Lines:
    """A child's stdout lines, read by a thread; :meth:`next` waits for the next one."""

    def __init__(self, stream: IO[str]) -> None:
        self._lines: list[str] = []
        self._cond = threading.Condition()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            with self._cond:
                self._lines.append(line.rstrip("\n"))
                self._cond.notify_all()

    def next(self, what: str, timeout: float = SAMPLE_TIMEOUT_S) -> str:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._lines:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchmarkError(f"no {what} within {timeout:g} s")
                self._cond.wait(left)
            return self._lines.pop(0)

    def drain(self) -> None:
        with self._cond:
            self._lines.clear()


class Marks:
    """The file the next target's body appends ``monotonic_ns`` lines to."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")
        self._seen = 0

    def next(self) -> int:
        deadline = time.monotonic() + SAMPLE_TIMEOUT_S
        while time.monotonic() < deadline:
            lines = self.path.read_text().splitlines()
            if len(lines) > self._seen:
                self._seen += 1
                return int(lines[self._seen - 1])
            time.sleep(0.0005)
        raise BenchmarkError("the resumed run's next body never ran")


class Zuke:
    """The build, its store, and a parked run at a time."""

    def __init__(self, cluster: PgCluster, root: Path) -> None:
        self.root = root / "zuke"
        self.root.mkdir()
        (self.root / "build.py").write_text(textwrap.dedent(BUILD))
        self.url = cluster.create_database()
        self.marks = Marks(self.root / "marks")
        self.env = {**child_env(CACHE_ROOT, bytecode_cache=True), "ZUKE_STATE": self.url,
                    "ZUKE_BENCH_MARKS": str(self.marks.path)}  # fmt: skip
        for name in ("ZUKE_STATE_DIR", "ZUKE_STATE_URL", "ZUKE_FILE"):
            self.env.pop(name, None)
        self.build: type[Build] = load_build_class(self.root / "build.py")
        self.store = PostgresStateStore(self.url)

    def park(self) -> str:
        """A new run, suspended at its gate (in this process: parking is not measured)."""
        os.environ["ZUKE_BENCH_MARKS"] = str(self.marks.path)
        result = execute(self.build, ["ship"], env=self.env)
        if result.status != "suspended" or result.run_id is None:
            raise BenchmarkError(f"a run ended {result.status}, not suspended at its gate")
        return result.run_id

    def deliver(self, run_id: str) -> None:
        """What ``zuke resume --signal go``'s delivery does: read the run, append the signal
        (decided on that read: a compare-and-swap on its version)."""
        found = self.store.get_run(run_id)
        assert found is not None
        action, _ = asyncio.run(store_signal(self.store, found.record, SignalDelivery("go"),
                                             redactor=Redactor(), actor="bench",
                                             clock=SYSTEM_CLOCK, known=found))  # fmt: skip
        if action != "stored":
            raise BenchmarkError(f"the signal was {action}, not stored")

    def close(self) -> None:
        self.store.close()


class Watcher:
    """``zuke resume --check --watch --json``: one JSON line a sweep."""

    def __init__(self, zk: Zuke) -> None:
        argv = [*zuke(), "resume", "--check", "--watch", "--every", "10m", "--json"]
        self.proc = subprocess.Popen(argv, cwd=zk.root, env=zk.env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)  # fmt: skip
        assert self.proc.stdout is not None
        self.lines = Lines(self.proc.stdout)
        self.lines.next("first sweep")

    def swept(self) -> dict[str, Any]:
        line = self.lines.next("sweep")
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def pause() -> None:
    time.sleep(random.uniform(0.1, 0.6))


def sample_watcher(zk: Zuke, watcher: Watcher) -> float:
    run_id = zk.park()
    watcher.swept()  # the park woke it: that sweep found nothing due
    pause()
    started = time.monotonic_ns()
    zk.deliver(run_id)
    reached = zk.marks.next()
    watcher.swept()  # the sweep that resumed it (reported once the run ended)
    return (reached - started) / 1e6


def sample_command(zk: Zuke) -> float:
    run_id = zk.park()
    pause()
    argv = [*zuke(), "resume", run_id, "--signal", "go"]
    started = time.monotonic_ns()
    done = subprocess.run(argv, cwd=zk.root, env=zk.env, capture_output=True, check=False)
    if done.returncode != 0:
        raise BenchmarkError(f"zuke resume exited {done.returncode}: {done.stderr[-2000:]!r}")
    return (zk.marks.next() - started) / 1e6


class Dbos:
    """DBOS's worker and sender, each a process of the given interpreter."""

    def __init__(self, python: str, cluster: PgCluster, root: Path) -> None:
        script = root / "dbos_wakeup.py"
        script.write_text(textwrap.dedent(DBOS_SCRIPT))
        url = cluster.create_database()
        env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}

        def start(role: str) -> tuple[subprocess.Popen[str], Lines]:
            proc = subprocess.Popen([python, str(script), role, url], env=env, text=True,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL)  # fmt: skip
            assert proc.stdout is not None
            return proc, Lines(proc.stdout)

        self.worker, self.worker_lines = start("worker")
        time.sleep(2)  # the worker migrates the system database first
        self.sender, self.sender_lines = start("send")
        self.sender_lines.next("DBOS sender", timeout=120)

    def sample(self) -> float:
        assert self.worker.stdin is not None and self.sender.stdin is not None
        self.worker.stdin.write("start\n")
        self.worker.stdin.flush()
        ready = self.worker_lines.next("DBOS workflow", timeout=120).split()
        pause()
        self.sender.stdin.write(f"{ready[1]}\n")
        self.sender.stdin.flush()
        sent = int(self.sender_lines.next("DBOS send").split()[1])
        got = int(self.worker_lines.next("DBOS recv").split()[1])
        return (got - sent) / 1e6

    def close(self) -> None:
        for proc in (self.sender, self.worker):
            if proc.stdin is not None:
                proc.stdin.close()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()


def measure(cluster: PgCluster, root: Path, samples: int, dbos_python: str | None) -> list[Row]:
    zk = Zuke(cluster, root)
    watcher: Watcher | None = None
    dbos = Dbos(dbos_python, cluster, root) if dbos_python else None
    got: dict[str, list[float]] = {"watcher": [], "command": [], "dbos": []}
    try:
        sample_command(zk)  # warm: the bytecode cache, the server's catalog
        watcher = Watcher(zk)
        sample_watcher(zk, watcher)
        if dbos is not None:
            dbos.sample()
        for _ in range(samples):
            got["watcher"].append(sample_watcher(zk, watcher))
            watcher.close()  # the command's resume is measured alone
            watcher = None
            got["command"].append(sample_command(zk))
            watcher = Watcher(zk)
            if dbos is not None:
                got["dbos"].append(dbos.sample())
    finally:
        if watcher is not None:
            watcher.close()
        if dbos is not None:
            dbos.close()
        zk.close()
    rows = [
        Row("signal stored → next body", "`zuke resume --check --watch` running",
            tuple(got["watcher"]), "p99 ≤ 50 ms"),
        Row("signal → next body", "`zuke resume RUN --signal go`, the whole command",
            tuple(got["command"]), "≤ 150 ms"),
    ]  # fmt: skip
    if dbos is not None:
        rows.append(Row("send → recv returns", "DBOS Transact (same server)", tuple(got["dbos"])))
    return rows


def markdown(rows: list[Row], note: str) -> str:
    lines = [
        "| what | how | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) | samples | target |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.how} | {r.pct(50):.1f} | {r.pct(90):.1f} | {r.pct(99):.1f} "
            f"| {max(r.samples_ms):.1f} | {len(r.samples_ms)} | {r.target} |"
        )
    lines += ["", machine_line()]
    if note:
        lines += ["", note]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=40, help="samples per variant")
    parser.add_argument(
        "--dbos-python",
        default=os.environ.get(DBOS_PYTHON_ENV),
        help=f"an interpreter with dbos installed (or ${DBOS_PYTHON_ENV})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    why = unavailable()
    if why:
        raise SystemExit(f"bench_wakeup: {why}")
    note = "" if args.dbos_python else (
        f"DBOS not measured: name an interpreter with dbos installed (--dbos-python or "
        f"{DBOS_PYTHON_ENV})"
    )  # fmt: skip
    cluster = start_cluster()
    try:
        with tempfile.TemporaryDirectory(prefix="zuke-bench-wakeup-") as tmp:
            rows = measure(cluster, Path(tmp), args.samples, args.dbos_python)
    finally:
        cluster.stop()
    if args.json:
        print(dump_json({
            "machine": machine(),
            "rows": [{"name": r.name, "how": r.how, "samples_ms": list(r.samples_ms),
                      "p50_ms": r.pct(50), "p90_ms": r.pct(90), "p99_ms": r.pct(99)}
                     for r in rows],
            "note": note,
        }))  # fmt: skip
    else:
        print(markdown(rows, note))


if __name__ == "__main__":
    main()
