"""State-store benchmarks: what durable run state adds to a run, in time and in bytes.

Run it with the project's interpreter::

    .venv/bin/python benchmarks/bench_state.py            # markdown
    .venv/bin/python benchmarks/bench_state.py --json     # machine-readable

Measured, on the 1000-target chain of ``bench_engine.py`` (each target depends
on the one before, trivial sync bodies):

- fresh ``zuke`` processes, wall clock, median of ``--runs`` (default 5) after
  one untimed warm-up run each, *interleaved* (one run of every variant, then
  the next round) so that other load on the machine hits all variants alike:

  - no state (the baseline);
  - ``--state`` on the default filesystem store (``.zuke/runs``);
  - the same with ``ZUKE_STATE_FSYNC=always`` (an fsync per journal append);
  - ``--state`` against a real ``zuke serve`` on 127.0.0.1 (``ZUKE_STATE_URL``
    and ``ZUKE_STATE_TOKEN``; a fresh server and database, stopped afterwards);

  plus the size of the run file each filesystem run left behind;
- in this process (``zuke.execute``, a build whose ``state_store()`` returns a
  :class:`~zuke.state.filesystem.FileSystemStateStore` instance): the bytes
  the store wrote (its ``bytes_written``), split into journal appends and
  compaction rewrites, the time spent inside store calls, and the wall time —
  for chains of 250, 500, 1000 and 2000 targets, to show that the bytes grow
  linearly with the run (bytes per target about constant).

With ``--listing`` it measures listing at scale instead: a filesystem store
of 20,000 runs (written straight to disk as journals, then indexed with
``rebuild_index()``, timed), ``zuke runs list --limit 20`` and ``--status
suspended`` (10 matches) as fresh processes — with no build file, and beside
the README's demo build (which a listing loads) — next to the interpreter's own
start-up, and the ``list_runs`` calls alone
in process, each on a new store instance (so opening the index is included),
beside the same queries answered by reading every journal (what listing did
before the index).

The ``zuke serve`` helper here (:func:`zuke_serve`) is shared with
``bench_locks.py``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import cast

# Importable both as a script (`python benchmarks/bench_state.py`) and as a module.
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import (
    BenchmarkError,
    Timing,
    display,
    dump_json,
    machine,
    markdown_table,
    time_once,
    zuke_command,
)
from bench_engine import chain_build, write_build
from bench_engine import child_env as engine_child_env

from zuke import (
    Build,
    Conflict,
    LockAcquired,
    LockHeld,
    LockHolder,
    StateStore,
    Written,
    execute,
)
from zuke.state._protocol import RunQuery
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.http import HttpStateStore
from zuke.state.records import RunDelta, RunRecord, RunStatus
from zuke.testing.serve import ServeStartError, listening_url

#: The goals from the state-store issue, for a 1000-target chain with state.
STATE_WALL_GOAL_S = 1.0
STATE_RATIO_GOAL = 3.0
CHAIN_TARGETS = 1000
SCALING_SIZES = (250, 500, 1000, 2000)
#: Smaller chains run against zuke serve too (the timed chain's size is added).
SERVE_SCALING_SIZES = (250, 500)


# -- environment ------------------------------------------------------------------


def child_env(root: Path, *, bytecode_cache: bool = True) -> dict[str, str]:
    """``bench_engine``'s child environment, without any other ``ZUKE_*`` setting either."""
    env = engine_child_env(root, bytecode_cache=bytecode_cache)
    return {k: v for k, v in env.items() if not k.startswith("ZUKE_")}


# -- a real zuke serve --------------------------------------------------------------

SERVE_START_DEADLINE_S = 20.0
SERVE_STOP_DEADLINE_S = 20.0


@dataclass(frozen=True)
class Server:
    """A running ``zuke serve``: its base URL and the token clients send."""

    url: str
    token: str
    db: Path
    log: Path
    pid: int = 0

    def cpu_s(self) -> float:
        """CPU seconds (user + system) the server process has used so far (Linux ``/proc``)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def client_env(self) -> dict[str, str]:
        """What a ``zuke`` process needs in its environment to use this server."""
        return {"ZUKE_STATE_URL": self.url, "ZUKE_STATE_TOKEN": self.token}

    def db_bytes(self) -> int:
        """The SQLite database's size on disk, write-ahead log included."""
        paths = [self.db, self.db.with_name(self.db.name + "-wal")]
        return sum(p.stat().st_size for p in paths if p.exists())


@contextmanager
def zuke_serve(workdir: Path, env: Mapping[str, str]) -> Iterator[Server]:
    """Start ``zuke serve --host 127.0.0.1 --port 0`` on a fresh database; always stop it.

    Waits (with a deadline) for its ``zuke serve listening on URL`` line. The
    server's stderr (a line per request) goes to a file in ``workdir``.
    """
    name = f"serve-{uuid.uuid4().hex[:8]}"
    db, log = workdir / f"{name}.db", workdir / f"{name}.log"
    token = f"bench-{uuid.uuid4().hex}"
    argv = [*zuke_command(), "serve", "--host", "127.0.0.1", "--port", "0", "--db", str(db)]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            argv,
            cwd=workdir,
            env={**env, "ZUKE_SERVE_TOKEN": token},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            bufsize=0,
        )
    try:
        url = _listening_url(proc, log)
        yield Server(url=url, token=token, db=db, log=log, pid=proc.pid)
    finally:
        code = _stop(proc)
    if code != 0:
        raise BenchmarkError(f"zuke serve exited with {code}:\n{_tail(log)}")


def _listening_url(proc: subprocess.Popen[bytes], log: Path) -> str:
    try:
        return listening_url(proc, deadline_s=SERVE_START_DEADLINE_S)
    except ServeStartError as exc:
        raise BenchmarkError(f"{exc}:\n{_tail(log)}") from None


def _stop(proc: subprocess.Popen[bytes]) -> int:
    """SIGTERM, wait with a deadline, SIGKILL past it; the exit code."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=SERVE_STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return -signal.SIGKILL
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


def _tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


# -- interleaved process timings -------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One command to time: its row name, argv, working directory and environment."""

    name: str
    argv: list[str]
    cwd: Path
    env: dict[str, str]


def interleaved(cases: Sequence[Case], *, runs: int, warmup: int = 1) -> list[Timing]:
    """Time every case ``runs`` times, one round of all cases at a time, after ``warmup`` rounds.

    Interleaving spreads drifting load (other jobs on the machine) over every
    case, so their ratios are fairer than back-to-back blocks of runs would give.
    """
    samples: dict[str, list[float]] = {case.name: [] for case in cases}
    for round_no in range(warmup + runs):
        for case in cases:
            elapsed = time_once(case.argv, cwd=case.cwd, env=case.env)
            if round_no >= warmup:
                samples[case.name].append(elapsed)
    return [
        Timing(
            name=case.name,
            command=display(case.argv),
            output="devnull",
            samples=tuple(samples[case.name]),
        )
        for case in cases
    ]


def run_files(cwd: Path) -> list[int]:
    """Sizes of the run journals a filesystem-store run left in ``cwd/.zuke/runs``."""
    return sorted(p.stat().st_size for p in (cwd / ".zuke" / "runs").glob("*.jsonl"))


# -- in-process runs -------------------------------------------------------------------


class CountingStore(FileSystemStateStore):
    """A filesystem store that also counts where its bytes and its time go."""

    def __init__(self, directory: Path, *, sync_appends: bool = False) -> None:
        super().__init__(directory, sync_appends=sync_appends)
        self.calls = 0
        self.store_s = 0.0
        self.append_s: list[float] = []
        self.compactions = 0
        self.compaction_bytes = 0

    def _timed(self, started: float) -> float:
        elapsed = time.perf_counter() - started
        self.calls += 1
        self.store_s += elapsed
        return elapsed

    def create_run(self, record: RunRecord) -> Written | Conflict:
        started = time.perf_counter()
        try:
            return super().create_run(record)
        finally:
            self._timed(started)

    def put_run(self, record: RunRecord, *, expected_version: str) -> Written | Conflict:
        started = time.perf_counter()
        try:
            return super().put_run(record, expected_version=expected_version)
        finally:
            self._timed(started)

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        started = time.perf_counter()
        try:
            result = super().append_run(run_id, delta, expected_version=expected_version)
        finally:
            self.append_s.append(self._timed(started))
        # A version is "<gen>:<length>"; a new gen means this append rewrote the file.
        if isinstance(result, Written):
            gen, _, length = result.version.rpartition(":")
            if gen != expected_version.rpartition(":")[0]:
                self.compactions += 1
                self.compaction_bytes += int(length)
        return result

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        started = time.perf_counter()
        try:
            return super().acquire_lock(key, holder, ttl_ms)
        finally:
            self._timed(started)

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        started = time.perf_counter()
        try:
            return super().renew_lock(key, token, ttl_ms)
        finally:
            self._timed(started)

    def release_lock(self, key: str, token: str) -> None:
        started = time.perf_counter()
        try:
            super().release_lock(key, token)
        finally:
            self._timed(started)


class TimedHttpStore(HttpStateStore):
    """An HTTP store that times its journal appends (``PATCH /runs/:id``)."""

    def __init__(self, url: str, *, token: str) -> None:
        super().__init__(url, token=token)
        self.append_s: list[float] = []
        self.append_cpu_s = 0.0  # CPU of the calling threads inside appends

    def append_run(
        self, run_id: str, delta: RunDelta, *, expected_version: str
    ) -> Written | Conflict:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return super().append_run(run_id, delta, expected_version=expected_version)
        finally:
            self.append_s.append(time.perf_counter() - started)
            self.append_cpu_s += time.thread_time() - cpu


#: How many appends at each end of a run :attr:`InProcess.append_ms_first` and
#: :attr:`InProcess.append_ms_last` take the median of.
APPEND_WINDOW = 100


@dataclass(frozen=True)
class InProcess:
    """One in-process run of an ``n``-target chain."""

    targets: int
    store: str  # "none", "filesystem", "filesystem, fsync always" or "zuke serve"
    wall_s: float
    bytes_written: int = 0
    run_file_bytes: int = 0
    appends: int = 0
    compactions: int = 0
    compaction_bytes: int = 0
    store_calls: int = 0
    store_s: float = 0.0
    append_ms_first: float = 0.0
    append_ms_last: float = 0.0
    #: zuke serve only: CPU per append, of the calling thread and of the server process
    client_cpu_ms: float = 0.0
    server_cpu_ms: float = 0.0

    @property
    def bytes_per_target(self) -> float:
        return self.bytes_written / self.targets

    def as_json(self) -> dict[str, object]:
        return {
            "targets": self.targets,
            "store": self.store,
            "wall_s": self.wall_s,
            "bytes_written": self.bytes_written,
            "bytes_per_target": self.bytes_per_target,
            "run_file_bytes": self.run_file_bytes,
            "appends": self.appends,
            "append_bytes": self.bytes_written - self.compaction_bytes,
            "compactions": self.compactions,
            "compaction_bytes": self.compaction_bytes,
            "store_calls": self.store_calls,
            "store_s": self.store_s,
            "append_ms_median_first": self.append_ms_first,
            "append_ms_median_last": self.append_ms_last,
            "client_cpu_ms_per_append": self.client_cpu_ms,
            "server_cpu_ms_per_append": self.server_cpu_ms,
        }


def load_chain(root: Path, n: int) -> type[Build]:
    """The generated ``n``-target chain, imported into this process."""
    path = root / f"inproc_chain_{n}.py"
    path.write_text(chain_build(n))
    spec = importlib.util.spec_from_file_location(f"zuke_bench_chain_{n}", path)
    if spec is None or spec.loader is None:
        raise BenchmarkError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(type[Build], module.Chain)


def execute_chain(root: Path, n: int, store: StateStore | None) -> float:
    """Run the ``n``-target chain with ``zuke.execute`` on ``store``; the wall seconds."""
    chain = load_chain(root, n)
    if store is not None:
        # The class keeps its name: runs record the build by class name.
        attrs = {"state_store": lambda _: store}
        chain = cast(type[Build], type(chain.__name__, (chain,), attrs))
    started = time.perf_counter()
    result = execute(chain, [f"t{n - 1:04d}"], env={})
    wall = time.perf_counter() - started
    if result.status != "succeeded" or result.recorded != (store is not None):
        raise BenchmarkError(f"in-process chain of {n}: {result.status}")
    return wall


def _ends_ms(samples: Sequence[float]) -> tuple[float, float]:
    """Median milliseconds of the first and of the last :data:`APPEND_WINDOW` samples."""
    if not samples:
        return 0.0, 0.0
    window = min(APPEND_WINDOW, len(samples))
    first = statistics.median(samples[:window]) * 1000
    last = statistics.median(samples[-window:]) * 1000
    return first, last


def run_without_state(root: Path, n: int) -> InProcess:
    return InProcess(targets=n, store="none", wall_s=execute_chain(root, n, None))


def run_on_filesystem(root: Path, n: int, *, fsync: bool = False) -> InProcess:
    """The chain on a fresh :class:`CountingStore`: its bytes, and its time in store calls."""
    directory = Path(tempfile.mkdtemp(prefix=f"inproc-runs-{n}-", dir=root))
    store = CountingStore(directory, sync_appends=fsync)
    wall = execute_chain(root, n, store)
    (journal,) = directory.glob("*.jsonl")
    first, last = _ends_ms(store.append_s)
    return InProcess(
        targets=n,
        store="filesystem, fsync always" if fsync else "filesystem",
        wall_s=wall,
        bytes_written=store.bytes_written,
        run_file_bytes=journal.stat().st_size,
        appends=len(store.append_s),
        compactions=store.compactions,
        compaction_bytes=store.compaction_bytes,
        store_calls=store.calls,
        store_s=store.store_s,
        append_ms_first=first,
        append_ms_last=last,
    )


def run_on_server(root: Path, n: int, server: Server) -> InProcess:
    """The chain against ``server``: its time in journal appends (``PATCH``)."""
    store = TimedHttpStore(server.url, token=server.token)
    server_cpu = server.cpu_s()
    try:
        wall = execute_chain(root, n, store)
    finally:
        store.close()
    server_cpu = server.cpu_s() - server_cpu
    first, last = _ends_ms(store.append_s)
    appends = max(1, len(store.append_s))
    return InProcess(
        targets=n,
        store="zuke serve",
        wall_s=wall,
        appends=len(store.append_s),
        store_s=sum(store.append_s),
        append_ms_first=first,
        append_ms_last=last,
        client_cpu_ms=store.append_cpu_s / appends * 1000,
        server_cpu_ms=server_cpu / appends * 1000,
    )


# -- the benchmark ---------------------------------------------------------------------

NO_STATE = "chain, no state"
FS = "chain, --state (filesystem)"
FS_FSYNC = "chain, --state, ZUKE_STATE_FSYNC=always"
SERVE = "chain, --state, zuke serve"


@dataclass
class Results:
    targets: int
    runs: int
    timings: list[Timing]
    run_file_bytes: dict[str, list[int]]
    serve_db_bytes: int
    serve_runs: int
    in_process: list[InProcess]
    scaling: list[InProcess]
    serve_scaling: list[InProcess]
    load_before: str
    load_after: str


def bench(root: Path, *, runs: int, targets: int, bytecode_cache: bool) -> Results:
    env = child_env(root, bytecode_cache=bytecode_cache)
    load_before = machine()["loadavg"]
    source = chain_build(targets)
    dirs = {
        name: write_build(root, slug, source)
        for name, slug in (
            (NO_STATE, "chain-none"),
            (FS, "chain-fs"),
            (FS_FSYNC, "chain-fsync"),
            (SERVE, "chain-serve"),
        )
    }
    last = f"t{targets - 1:04d}"
    zuke = zuke_command()
    with zuke_serve(root, env) as server:
        cases = [
            Case(NO_STATE, [*zuke, last], dirs[NO_STATE], env),
            Case(FS, [*zuke, last, "--state"], dirs[FS], env),
            Case(
                FS_FSYNC,
                [*zuke, last, "--state"],
                dirs[FS_FSYNC],
                {**env, "ZUKE_STATE_FSYNC": "always"},
            ),
            Case(SERVE, [*zuke, last, "--state"], dirs[SERVE], {**env, **server.client_env()}),
        ]
        timings = interleaved(cases, runs=runs)
        # Fresh processes (warm-up included), then the in-process runs below.
        serve_runs = runs + 1 + len(SERVE_SCALING_SIZES) + 1
        serve_scaling = [run_on_server(root, n, server) for n in SERVE_SCALING_SIZES]
        serve_in_process = run_on_server(root, targets, server)
    serve_db_bytes = server.db_bytes()
    in_process = [
        run_without_state(root, targets),
        run_on_filesystem(root, targets),
        run_on_filesystem(root, targets, fsync=True),
        serve_in_process,
    ]
    scaling = [run_on_filesystem(root, n) for n in SCALING_SIZES]
    return Results(
        targets=targets,
        runs=runs,
        timings=timings,
        run_file_bytes={FS: run_files(dirs[FS]), FS_FSYNC: run_files(dirs[FS_FSYNC])},
        serve_db_bytes=serve_db_bytes,
        serve_runs=serve_runs,
        in_process=in_process,
        scaling=scaling,
        serve_scaling=[*serve_scaling, serve_in_process],
        load_before=load_before,
        load_after=machine()["loadavg"],
    )


# -- report ----------------------------------------------------------------------------


def _timing(results: Results, name: str) -> Timing:
    for t in results.timings:
        if t.name == name:
            return t
    raise LookupError(name)


def goals(results: Results) -> list[dict[str, object]]:
    """For every state variant: under 1.0 s, and under 3x the run without state."""
    base = _timing(results, NO_STATE).median
    rows: list[dict[str, object]] = []
    for name in (FS, FS_FSYNC, SERVE):
        median = _timing(results, name).median
        ratio = median / base
        rows.append(
            {
                "variant": name,
                "median_s": median,
                "ratio": ratio,
                "wall_limit_s": STATE_WALL_GOAL_S,
                "ratio_limit": STATE_RATIO_GOAL,
                "wall_met": median < STATE_WALL_GOAL_S,
                "ratio_met": ratio < STATE_RATIO_GOAL,
                "issue_goal": name == FS,
            }
        )
    return rows


def as_json(results: Results) -> dict[str, object]:
    return {
        "machine": machine(),
        "load_before": results.load_before,
        "load_after": results.load_after,
        "method": {
            "runs": results.runs,
            "warmup": 1,
            "statistic": "median",
            "clock": "wall",
            "interleaved": True,
            "targets": results.targets,
        },
        "timings": [t.as_json() for t in results.timings],
        "run_file_bytes": results.run_file_bytes,
        "serve": {"db_bytes": results.serve_db_bytes, "runs": results.serve_runs},
        "in_process": [r.as_json() for r in results.in_process],
        "scaling": [r.as_json() for r in results.scaling],
        "serve_scaling": [r.as_json() for r in results.serve_scaling],
        "goals": goals(results),
    }


def _in_process_table(rows: Sequence[InProcess]) -> list[str]:
    lines = [
        "| targets | store | wall (s) | in store calls (s) | store calls | bytes written "
        "| bytes / target | appends | compactions (bytes) | run file (bytes) "
        f"| append ms, first / last {APPEND_WINDOW} |",
        "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if r.store == "none":
            lines.append(f"| {r.targets} | none | {r.wall_s:.3f} | | | | | | | | |")
            continue
        ends = f"{r.append_ms_first:.2f} / {r.append_ms_last:.2f}"
        if r.store == "zuke serve":
            lines.append(
                f"| {r.targets} | {r.store} | {r.wall_s:.3f} | {r.store_s:.3f} (appends) | "
                f"| | | {r.appends} | | | {ends} |"
            )
            continue
        lines.append(
            f"| {r.targets} | {r.store} | {r.wall_s:.3f} | {r.store_s:.3f} | {r.store_calls} "
            f"| {r.bytes_written:,} | {r.bytes_per_target:.0f} | {r.appends} "
            f"| {r.compactions} ({r.compaction_bytes:,}) | {r.run_file_bytes:,} | {ends} |"
        )
    return lines


def render(results: Results) -> str:
    m = machine()
    n = results.targets
    lines = [
        "# zuke state-store benchmarks",
        "",
        f"Machine: {m['nproc']} CPUs ({m['cpu']}), Python {m['python']} ({m['platform']}); "
        f"load average {results.load_before} before, {results.load_after} after.",
        f"Method: fresh processes, wall clock, median of {results.runs} after 1 warm-up run, "
        "variants interleaved; bytecode cache on.",
        "",
        f"## {n}-target chain, fresh processes",
        "",
        markdown_table(results.timings),
        "",
    ]
    for name, sizes in results.run_file_bytes.items():
        median = statistics.median(sizes) if sizes else 0
        lines.append(f"- run file left by `{name}`: {median:,.0f} bytes (median of {len(sizes)})")
    lines += [
        f"- zuke serve database after {results.serve_runs} runs (fresh processes, then in "
        f"process): {results.serve_db_bytes:,} bytes",
        "",
        "Goals (the issue's are for the default filesystem store; the others for comparison):",
        "",
    ]
    for g in goals(results):
        wall = "met" if g["wall_met"] else "NOT met"
        ratio = "met" if g["ratio_met"] else "NOT met"
        lines.append(
            f"- {g['variant']}: {g['median_s']:.3f} s < {STATE_WALL_GOAL_S} s {wall}; "
            f"{g['ratio']:.2f}x the run without state < {STATE_RATIO_GOAL}x {ratio}"
        )
    lines += [
        "",
        f"## In process ({n} targets)",
        "",
        *_in_process_table(results.in_process),
        "",
        "## Scaling (in process, filesystem store, fsync at checkpoints)",
        "",
        *_in_process_table(results.scaling),
        "",
        "## Scaling against zuke serve (in process)",
        "",
        *_in_process_table(results.serve_scaling),
        "",
        "CPU per append (ms): the calling thread (the client) / the server process:",
        "",
        *(
            f"- {r.targets} targets: {r.client_cpu_ms:.3f} / {r.server_cpu_ms:.3f}"
            for r in results.serve_scaling
        ),
    ]
    return "\n".join(lines)


# -- listing at scale (--listing) -------------------------------------------------------

LISTING_RUNS = 20_000
LISTING_SUSPENDED = 10
LISTING_BUILDS = ("Release", "Nightly", "Docs")


def write_store(directory: Path, n: int) -> None:
    """``n`` plausible finished runs (and a few suspended ones), straight to disk.

    The fast path: one plain ``write`` of a compacted journal per run, no mutex
    and no fsync, since 20,000 real runs would take hours.
    """
    from zuke.state import _journal
    from zuke.state.records import GraphNode, TargetRecord

    directory.mkdir(parents=True)
    names = ("checkout", "lint", "build", "test", "package", "publish", "deploy", "notify")
    suspended = {n * (i + 1) // (LISTING_SUSPENDED + 1) for i in range(LISTING_SUSPENDED)}
    for i in range(n):
        minute = i // 60
        stamp = f"2026-01-{1 + minute // 1440:02d}T{minute // 60 % 24:02d}:{minute % 60:02d}"
        created = f"{stamp}:{i % 60:02d}.000Z"
        status: RunStatus = "suspended" if i in suspended else ("succeeded", "failed")[i % 7 == 0]
        record = RunRecord(
            id=f"run-{i:06d}-{uuid.uuid4().hex[:8]}",
            build=LISTING_BUILDS[i % len(LISTING_BUILDS)],
            root_target="notify",
            status=status,
            actor="bench",
            created_at=created,
            updated_at=created,
            graph=tuple(GraphNode(t, (names[k - 1],) if k else ()) for k, t in enumerate(names)),
            targets={
                t: TargetRecord(status="succeeded", started_at=created, ended_at=created)
                for t in names
            },
        )
        data, _ = _journal.compacted(record)
        (directory / f"{record.id}{_journal.SUFFIX}").write_bytes(data)


def _in_process(directory: Path, query: RunQuery, *, runs: int, scan: bool = False) -> Timing:
    from zuke.state._query import select

    samples = []
    count = 0
    for _ in range(runs + 1):
        store = FileSystemStateStore(directory)
        started = time.perf_counter()
        found = select(store.scan(), query) if scan else store.list_runs(query)
        samples.append(time.perf_counter() - started)
        count = len(found)
    name = f"{'scan every journal' if scan else 'list_runs'}: {_describe(query)} ({count} runs)"
    return Timing(name=name, command="", output="devnull", samples=tuple(samples[1:]))


def _describe(query: RunQuery) -> str:
    parts = [f"{k}={v}" for k, v in vars(query).items() if v is not None]
    return ", ".join(parts) or "everything"


@dataclass(frozen=True)
class ListingResults:
    runs: int
    store_bytes: int
    index_bytes: int
    write_s: float
    rebuild_s: float
    commands: list[Timing]
    calls: list[Timing]
    machine: dict[str, str]


def bench_listing(root: Path, *, runs: int, n: int = LISTING_RUNS) -> ListingResults:
    directory = root / "store"
    started = time.perf_counter()
    write_store(directory, n)
    write_s = time.perf_counter() - started
    started = time.perf_counter()
    FileSystemStateStore(directory).rebuild_index()
    rebuild_s = time.perf_counter() - started
    store_bytes = sum(p.stat().st_size for p in directory.glob("*.jsonl"))
    index_bytes = sum(p.stat().st_size for p in (directory / "index").iterdir())
    empty = root / "empty"
    empty.mkdir()
    cwd = root / "cwd"
    cwd.mkdir()
    demo = root / "demo"  # `runs list` loads a build file it finds: the README's demo
    demo.mkdir()
    (demo / "build.py").write_bytes(DEMO_BUILD.read_bytes())
    zuke = zuke_command()
    env = {**child_env(root), "ZUKE_STATE_DIR": str(directory)}
    empty_env = {**env, "ZUKE_STATE_DIR": str(empty)}
    limit, suspended = ["runs", "list", "--limit", "20"], ["runs", "list", "--status", "suspended"]
    cases = [
        Case("interpreter start-up", [sys.executable, "-c", "pass"], cwd, env),
        Case("runs list --limit 20, empty store", [*zuke, *limit], cwd, empty_env),
        Case("runs list --limit 20", [*zuke, *limit], cwd, env),
        Case("runs list --status suspended", [*zuke, *suspended], cwd, env),
        Case("runs list --limit 20, beside the demo build", [*zuke, *limit], demo, env),
        Case("runs list --status suspended, beside the demo build", [*zuke, *suspended], demo, env),
    ]
    commands = interleaved(cases, runs=runs)
    queries = [
        RunQuery(limit=20),
        RunQuery(status="suspended"),
        RunQuery(build="Release", status="suspended"),
        RunQuery(target="deploy", limit=20),
        RunQuery(limit=1),
    ]
    calls = [_in_process(directory, q, runs=max(runs, 10)) for q in queries]
    calls.append(_in_process(directory, RunQuery(), runs=3))
    calls += [_in_process(directory, q, runs=3, scan=True) for q in queries[:2]]
    return ListingResults(
        runs=n,
        store_bytes=store_bytes,
        index_bytes=index_bytes,
        write_s=write_s,
        rebuild_s=rebuild_s,
        commands=commands,
        calls=calls,
        machine=machine(),
    )


LISTING_GOALS = {"runs list --limit 20": 0.100, "runs list --status suspended": 0.150}
#: The README's demo build, the build file a listing beside one loads.
DEMO_BUILD = Path(__file__).resolve().parents[1] / "docs" / "demo" / "build.py"


def render_listing(results: ListingResults) -> str:
    ms = "| what | median (ms) | min (ms) | max (ms) | runs |"
    lines = [
        f"# Listing {results.runs:,} runs (filesystem store)",
        "",
        f"Machine: {results.machine}",
        "",
        f"Store: {results.store_bytes:,} bytes of journals, index {results.index_bytes:,} bytes; "
        f"written in {results.write_s:.1f} s, `rebuild_index()` {results.rebuild_s:.1f} s.",
        "",
        "Fresh processes (`ZUKE_STATE_DIR`; no build file unless the demo's is named):",
        "",
        "| command | median (ms) | min (ms) | max (ms) | goal | runs |",
        "| --- | ---: | ---: | ---: | --- | ---: |",
    ]
    for t in results.commands:
        goal = LISTING_GOALS.get(t.name.split(", beside")[0])
        verdict = (
            ""
            if goal is None
            else f"< {goal * 1000:.0f} ms: " + ("met" if t.median < goal else "not met")
        )
        lines.append(
            f"| `{t.command}` ({t.name}) | {t.median * 1000:.1f} | {t.best * 1000:.1f} "
            f"| {t.worst * 1000:.1f} | {verdict} | {len(t.samples)} |"
        )
    lines += [
        "",
        "In process, a new store instance per call:",
        "",
        ms,
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for t in results.calls:
        lines.append(
            f"| {t.name} | {t.median * 1000:.2f} | {t.best * 1000:.2f} | {t.worst * 1000:.2f} "
            f"| {len(t.samples)} |"
        )
    return "\n".join(lines)


def listing_json(results: ListingResults) -> dict[str, object]:
    return {
        "runs": results.runs,
        "store_bytes": results.store_bytes,
        "index_bytes": results.index_bytes,
        "write_s": results.write_s,
        "rebuild_s": results.rebuild_s,
        "commands": [t.as_json() for t in results.commands],
        "calls": [t.as_json() for t in results.calls],
        "machine": results.machine,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    parser.add_argument("--runs", type=int, default=5, help="timed runs per variant (default 5)")
    parser.add_argument(
        "--targets", type=int, default=CHAIN_TARGETS, help="size of the timed chain (default 1000)"
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="do not give the children a bytecode cache (measures compiling from source)",
    )
    parser.add_argument(
        "--listing",
        action="store_true",
        help=f"measure listing {LISTING_RUNS:,} runs instead of the chain",
    )
    args = parser.parse_args(argv)
    if args.runs < 1 or args.targets < 2:
        parser.error("--runs must be at least 1 and --targets at least 2")
    if args.listing:
        with tempfile.TemporaryDirectory(prefix="zuke-bench-listing-") as tmp:
            listed = bench_listing(Path(tmp), runs=args.runs)
        print(dump_json(listing_json(listed)) if args.json else render_listing(listed))
        return 0
    with tempfile.TemporaryDirectory(prefix="zuke-bench-state-") as tmp:
        results = bench(
            Path(tmp),
            runs=args.runs,
            targets=args.targets,
            bytecode_cache=not args.no_bytecode_cache,
        )
    print(dump_json(as_json(results)) if args.json else render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
