"""Postgres store benchmarks (issue 18): the chain, locks, the sweep and the listing.

Run it with the project's interpreter (Postgres binaries and ``zuke[postgres]`` needed)::

    .venv/bin/python benchmarks/bench_postgres.py            # markdown
    .venv/bin/python benchmarks/bench_postgres.py --json     # machine-readable

It starts its own throwaway cluster (``tests/pg_support.py``: ``initdb``, a
loopback port, trust authentication, ``fsync=off``, stopped at exit), one
fresh database per row, and measures, each the median of ``--runs`` after an
untimed warm-up:

- **chain**: ``zuke t0999 --state`` on a 1000-target chain, a fresh process,
  with ``ZUKE_STATE=postgresql://…`` against ``ZUKE_STATE_DIR`` (the
  filesystem store), in pairs; the target is within 1.3 times the filesystem
  store's (issue 28: the ratio of the medians, and the median of the pairs'
  ratios), every transition still durable before the next body starts; and
  the CPU of each: zuke's, and the run's Postgres backend's (``_pg_chain.py``),
  steadier than wall time on a shared machine; and beside them, in the same
  rounds, the floor: the filesystem store plus one bare ``SELECT 1`` round trip
  to the same server a transition (``_pg_chain.floor_build``);
- **append**: where a transition's time goes — one append of a chain's delta
  (a target settled, the next one running), in this process, ``--pairs``
  times per variant, the variants interleaved in blocks: the store's
  ``append_run_known`` on Postgres and on the filesystem store (the real
  path, Python included), then the Postgres statement alone — a bare
  ``SELECT 1`` round trip (the floor), the prepared append (``EXECUTE``,
  schema 4), the function ``zuke_append`` (schema 4), schema 3's
  data-modifying ``WITH`` sent as text (parsed and planned on every call) on
  schema 4's tables, and on tables as schema 3 had them (foreign keys, the
  signal trigger, the witness row): p50 of a call;
- **locks**: acquire + release of one key on the store, in this process,
  ``--pairs`` times: p50 and p99 of a pair;
- **sweep**: ``zuke resume --check`` over ``--suspended`` runs suspended at a
  signal gate with nothing due, a fresh process: the command, and per run
  (the command less the same command over an empty database, divided by the
  runs);
- **overlap**: a chain's transitions in this process, the append sent and answered
  later (the store as it is) against every append the ordinary way, alternating
  blocks (``_pg_overlap.py``): wall and CPU per target, and the paired ratio;
- **listing**: ``zuke runs list --limit 20`` over ``--listed`` runs (20,000),
  a fresh process, against the same command on an empty filesystem store;
  the target is 120 ms or less (issue 25).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.pg_support
from _pg_chain import FLOOR_URL_ENV, Sample, ServerCpu, floor_build, run_once
from _pg_overlap import transitions
from _timing import BenchmarkError, dump_json, machine, machine_line, time_once
from _timing import zuke_command as zuke
from bench_engine import chain_build, child_env

from tests.pg_support import PgCluster, connected, start_cluster, unavailable
from zuke import Build, execute
from zuke._loader import load_build_class
from zuke.state import _pg_append
from zuke.state._pg_runs import dumps
from zuke.state._protocol import LockAcquired, RunQuery, StateStore, Written
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunDelta, RunRecord, TargetRecord, apply_delta
from zuke.state.wire import delta_to_json
from zuke.testing.store_contract import sample_holder, sample_record

CHAIN_TARGETS = 1000
#: the children's bytecode cache goes under here (as ``bench_engine.py``'s: an installed
#: zuke has one)
CACHE_ROOT = Path(tempfile.gettempdir()) / "zuke-bench-pg"


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    """The children's environment: no state settings but ``extra``, a bytecode cache."""
    return {**child_env(CACHE_ROOT, bytecode_cache=True), **extra}


GATED = """
    from zuke import Build, external_signal, target

    class Gated(Build):
        @target
        def deploy(self, t):
            return t.executes(lambda: None)

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("72h"))
"""


@dataclass(frozen=True)
class Row:
    name: str
    how: str
    samples: tuple[float, ...]
    #: what the row is per (runs in a sweep), for a per-run figure
    per: int = 0
    note: str = ""

    @property
    def median_s(self) -> float:
        return statistics.median(self.samples)


def timed(samples: int, once: Callable[[], float]) -> tuple[float, ...]:
    once()  # warm-up
    return tuple(once() for _ in range(samples))


def bench_chain(cluster: PgCluster, root: Path, samples: int) -> list[Row]:
    """The chain on the filesystem store, on the floor (``_pg_chain.floor_build``) and on
    Postgres, the three back to back in each round."""
    for name, text in (("chain", chain_build(CHAIN_TARGETS)),
                       ("floor", floor_build(chain_build(CHAIN_TARGETS)))):  # fmt: skip
        (root / name).mkdir()
        (root / name / "build.py").write_text(text)
    argv = [*zuke(), f"t{CHAIN_TARGETS - 1:04d}", "--state"]
    fs = clean_env({"ZUKE_STATE_DIR": str(root / "chain-store")})
    floor = clean_env({"ZUKE_STATE_DIR": str(root / "floor-store"),
                       FLOOR_URL_ENV: cluster.create_database()})  # fmt: skip
    url = cluster.create_database()
    pg = clean_env({"ZUKE_STATE": url})
    server = ServerCpu(cluster.data)
    served = server if server.available else None
    database = url.rsplit("/", 1)[1]

    def round_() -> tuple[Sample, Sample, Sample]:
        here, there = root / "chain", root / "floor"
        return (run_once(argv, cwd=here, env=fs), run_once(argv, cwd=there, env=floor),
                run_once(argv, cwd=here, env=pg, server=served, database=database))  # fmt: skip

    round_()  # warm-up
    rounds = [round_() for _ in range(samples)]  # back to back, so all see the same load
    fs_s = [f.wall_s for f, _, _ in rounds]
    floor_s = [r.wall_s for _, r, _ in rounds]
    pg_s = [p.wall_s for _, _, p in rounds]

    def ratio(these: list[float], those: list[float]) -> str:
        # each round ran back to back, under the same load: the median of the rounds'
        # ratios is steadier than the ratio of the medians when other work comes and goes
        paired = statistics.median(a / b for a, b in zip(these, those, strict=True))
        of_medians = statistics.median(these) / statistics.median(those)
        return f"{of_medians:.2f}× (median of the paired ratios: {paired:.2f}×)"

    rows = [
        Row("1000-target chain", "filesystem store", tuple(fs_s)),
        Row("1000-target chain", "the floor: filesystem store + a bare SELECT 1 a transition",
            tuple(floor_s), note=f"{ratio(floor_s, fs_s)} filesystem"),
        Row("1000-target chain", "Postgres store", tuple(pg_s),
            note=f"{ratio(pg_s, fs_s)} filesystem; {ratio(pg_s, floor_s)} the floor"),
        Row("1000-target chain, CPU", "filesystem store: zuke", tuple(f.cpu_s for f, *_ in rounds)),
        Row("1000-target chain, CPU", "the floor: zuke", tuple(r.cpu_s for _, r, _ in rounds)),
        Row("1000-target chain, CPU", "Postgres store: zuke", tuple(p.cpu_s for _, _, p in rounds)),
    ]  # fmt: skip
    if served is not None:  # the backend's CPU: what the filesystem run has no peer of
        both = [p.cpu_s + (p.server_s or 0.0) for _, _, p in rounds]
        cpu_ratio = statistics.median(both) / statistics.median(f.cpu_s for f, _, _ in rounds)
        rows += [
            Row("1000-target chain, CPU", "Postgres store: its backend",
                tuple(p.server_s or 0.0 for _, _, p in rounds)),
            Row("1000-target chain, CPU", "Postgres store: zuke + its backend", tuple(both),
                note=f"{cpu_ratio:.2f}× the filesystem run's CPU"),
        ]  # fmt: skip
    return rows


#: schema 3's append, sent as text (parsed and planned on every call); ``{deltas}`` and
#: ``{writes}`` name the journal and witness tables
SCHEMA_3_APPEND = (
    "WITH u AS (UPDATE zuke_runs SET version = %(version)s, updated_at = %(updated_at)s,"
    " status = COALESCE(%(status)s, status), actor = COALESCE(%(actor)s, actor),"
    " journal_bytes = journal_bytes + %(bytes)s, last_seq = last_seq + 1"
    " WHERE ns = '' AND id = %(id)s AND version = %(expected)s"
    " RETURNING ns, id, version, last_seq, base_bytes, journal_bytes),"
    " d AS (INSERT INTO {deltas} (ns, run_id, seq, delta) SELECT ns, id, last_seq, %(delta)s"
    " FROM u), w AS (INSERT INTO {writes} (ns, run_id, write_key, version)"
    " SELECT ns, id, %(key)s, version FROM u ON CONFLICT DO NOTHING)"
    " SELECT version, journal_bytes > GREATEST(base_bytes, 65536) FROM u"
)
#: schema 3's journal and witness tables, with their foreign keys and the journal's signal
#: trigger, beside schema 4's
SCHEMA_3_TABLES = (
    "CREATE TABLE bench_deltas (LIKE zuke_run_deltas INCLUDING ALL,"
    " FOREIGN KEY (ns, run_id) REFERENCES zuke_runs (ns, id) ON DELETE CASCADE)",
    "CREATE TABLE bench_writes (LIKE zuke_run_writes INCLUDING ALL,"
    " FOREIGN KEY (ns, run_id) REFERENCES zuke_runs (ns, id) ON DELETE CASCADE)",
    "CREATE TRIGGER bench_signalled AFTER INSERT ON bench_deltas FOR EACH ROW"
    """ WHEN (strpos(NEW.delta, '"signals":{') > 0) EXECUTE FUNCTION zuke_notify_run()""",
)


def chain_delta(i: int) -> RunDelta:
    """A chain's transition: target ``i`` settled and target ``i + 1`` running."""
    at = "2026-01-02T03:04:05.678Z"
    return RunDelta(updated_at=at, targets={
        f"t{i:04d}": TargetRecord(status="succeeded", started_at=at, ended_at=at),
        f"t{i + 1:04d}": TargetRecord(status="running", started_at=at),
    })  # fmt: skip


def bench_append(cluster: PgCluster, root: Path, calls: int, rounds: int = 7) -> list[Row]:
    """Per-call p50 of each way of making a transition's append, the ways interleaved."""
    url = cluster.create_database()
    store = PostgresStateStore(url)
    fs = FileSystemStateStore(root / "append-store")
    stores: dict[str, tuple[StateStore, RunRecord, list[str]]] = {}
    for name, s in (("pg", store), ("fs", fs)):
        record = sample_record(f"bench-{name}")
        made = s.create_run(record)
        assert isinstance(made, Written)
        stores[name] = (s, record, [made.version])
    sql: dict[str, list[int]] = {}
    with connected(url) as conn:
        for ddl in SCHEMA_3_TABLES:
            conn.execute(ddl)
        conn.execute(f"PREPARE {_pg_append.NAME} ({_pg_append.TYPES}) AS {_pg_append.STATEMENT}")
        for name in ("prepared", "fn", "text", "text-fk"):
            made = store.create_run(sample_record(f"bench-{name}"))
            assert isinstance(made, Written)
            sql[name] = [int(made.version)]
        versions = iter(range(10**12, 10**13))
        line = dumps(delta_to_json(chain_delta(0)))

        def api(name: str) -> Callable[[int], None]:
            s, record, at = stores[name]

            def call(i: int) -> None:
                delta = chain_delta(i)
                record_after = apply_delta(record, delta)
                done = s.append_run_known(  # type: ignore[attr-defined]
                    record.id, delta, expected_version=at[-1], after=record_after
                )
                assert isinstance(done, Written), done
                at.append(done.version)

            return call

        def statement(name: str) -> Callable[[int], None]:
            at = sql[name]
            deltas, writes = ("bench_deltas", "bench_writes") if name == "text-fk" else (
                "zuke_run_deltas", "zuke_run_writes")  # fmt: skip
            text = SCHEMA_3_APPEND.format(deltas=deltas, writes=writes)

            def call(i: int) -> None:
                version = next(versions)
                args = {"id": f"bench-{name}", "expected": at[-1], "version": version,
                        "updated_at": "2026-01-02T03:04:05.678Z", "status": None,
                        "actor": None, "bytes": len(line), "delta": line,
                        "key": f"v:{version}"}  # fmt: skip
                if name == "prepared":
                    row = conn.execute(
                        f"EXECUTE {_pg_append.NAME} (''::text, %(id)s, %(expected)s,"
                        " %(version)s, %(key)s, %(updated_at)s, %(delta)s, 65536)",
                        args,
                    ).fetchone()
                elif name == "fn":
                    row = conn.execute(
                        "SELECT zuke_append(''::text, %(id)s, %(expected)s, %(version)s,"
                        " %(key)s, %(updated_at)s, NULL, NULL, %(delta)s, 65536, false)",
                        args,
                    ).fetchone()
                else:
                    row = conn.execute(text, args).fetchone()
                assert row is not None and row[0] is not None
                at.append(version)

            return call

        def bare(i: int) -> None:
            conn.execute("SELECT 1").fetchone()

        variants: dict[str, Callable[[int], None]] = {
            "Postgres store, `append_run_known` (schema 4)": api("pg"),
            "filesystem store, `append_run_known`": api("fs"),
            "`SELECT 1` (a bare round trip)": bare,
            "the prepared append alone (`EXECUTE`, schema 4)": statement("prepared"),
            "`zuke_append(...)` alone (the function, schema 4)": statement("fn"),
            "schema 3's statement as text, on schema 4's tables": statement("text"),
            "schema 3's statement as text, on schema 3's tables": statement("text-fk"),
        }
        laps: dict[str, list[float]] = {name: [] for name in variants}
        step = 0
        for _ in range(rounds):  # interleaved blocks: every variant sees the same load
            for name, call in variants.items():
                for _ in range(calls // rounds):
                    step += 1
                    started = time.perf_counter()
                    call(step)
                    laps[name].append(time.perf_counter() - started)
    store.close()
    return [
        Row("one append (a transition)", name, (statistics.median(got),),
            note=f"{len(got)} calls, p50")
        for name, got in laps.items()
    ]  # fmt: skip


def bench_overlap(cluster: PgCluster, rounds: int, targets: int = 200) -> list[Row]:
    found = transitions(cluster.create_database(), targets, rounds)
    sent, ordinary = found["sent"], found["ordinary"]
    paired = statistics.median(s[0] / o[0] for s, o in zip(sent, ordinary, strict=True))
    note = f"{rounds} blocks of {targets} targets each, alternating, in process"
    return [
        Row("a chain's transitions, per target", "the append sent, answered later",
            tuple(w for w, _ in sent), note=f"{paired:.3f}× ordinary (paired)"),
        Row("a chain's transitions, per target", "every append the ordinary way",
            tuple(w for w, _ in ordinary), note=note),
        Row("a chain's transitions, per target, CPU", "the append sent, answered later",
            tuple(c for _, c in sent)),
        Row("a chain's transitions, per target, CPU", "every append the ordinary way",
            tuple(c for _, c in ordinary)),
    ]  # fmt: skip


def bench_locks(cluster: PgCluster, pairs: int) -> list[Row]:
    store = PostgresStateStore(cluster.create_database())
    try:
        holder = sample_holder("bench-run")
        laps = []
        for i in range(pairs + 100):
            started = time.perf_counter()
            got = store.acquire_lock("bench-lock", holder, 60_000)
            assert isinstance(got, LockAcquired)
            store.release_lock("bench-lock", got.token)
            if i >= 100:  # the first hundred warm the pool and the plan cache
                laps.append(time.perf_counter() - started)
    finally:
        store.close()
    laps.sort()
    p99 = laps[min(len(laps) - 1, int(len(laps) * 0.99))]
    return [
        Row("lock acquire + release", "p50", (statistics.median(laps),)),
        Row("lock acquire + release", "p99", (p99,), note=f"{pairs} pairs, one key, in process"),
    ]


def bench_sweep(cluster: PgCluster, root: Path, samples: int, suspended: int) -> list[Row]:
    (root / "gated").mkdir()
    (root / "gated" / "build.py").write_text(textwrap.dedent(GATED))
    build: type[Build] = load_build_class(root / "gated" / "build.py")
    url = cluster.create_database()
    env = clean_env({"ZUKE_STATE": url})
    for _ in range(suspended):
        result = execute(build, ["approve"], env=env)
        if result.status != "suspended":
            raise BenchmarkError(f"a gated run ended {result.status}, not suspended")
    argv = [*zuke(), "resume", "--check"]
    empty = clean_env({"ZUKE_STATE": cluster.create_database()})
    floor = timed(samples, lambda: time_once(argv, cwd=root / "gated", env=empty))
    full = timed(samples, lambda: time_once(argv, cwd=root / "gated", env=env))
    per_run = (statistics.median(full) - statistics.median(floor)) / suspended
    return [
        Row("`zuke resume --check`, nothing due", "no runs", floor),
        Row(
            "`zuke resume --check`, nothing due",
            f"{suspended} suspended runs",
            full,
            per=suspended,
            note=f"{per_run * 1000:.2f} ms per run over the empty database",
        ),
    ]


def fill(url: str, count: int) -> None:
    """``count`` runs through the store's own ``create_run`` (a few statuses and builds)."""
    store = PostgresStateStore(url)
    try:
        base = sample_record("bench-0")
        for i in range(count):
            record = replace(
                base,
                id=f"bench-{i:06d}",
                status=("succeeded", "failed", "suspended", "running")[i % 4],
                build=("Release", "Nightly")[i % 2],
                created_at=f"2026-{1 + i % 12:02d}-{1 + i % 28:02d}T{i % 24:02d}:{i % 60:02d}:00Z",
            )
            if not isinstance(store.create_run(record), Written):
                raise BenchmarkError(f"run {record.id} was not created")
        if len(store.list_runs(RunQuery())) != count:
            raise BenchmarkError("the listing does not hold every run")
    finally:
        store.close()


def bench_listing(cluster: PgCluster, root: Path, samples: int, listed: int) -> list[Row]:
    url = cluster.create_database()
    fill(url, listed)
    argv = [*zuke(), "runs", "list", "--limit", "20"]
    pg = clean_env({"ZUKE_STATE": url})
    fs = clean_env({"ZUKE_STATE_DIR": str(root / "empty-store")})

    variants = {
        "Postgres store (psycopg2)": pg,
        "filesystem store, empty": fs,
    }
    samples_of: dict[str, list[float]] = {how: [] for how in variants}
    for env in variants.values():
        time_once(argv, cwd=root, env=env)  # warm-up
    for _ in range(samples):  # interleaved, so every variant sees the same load
        for how, env in variants.items():
            samples_of[how].append(time_once(argv, cwd=root, env=env))
    name = f"`zuke runs list --limit 20`, {listed:,} runs"
    return [
        Row(name if "filesystem" not in how else "`zuke runs list --limit 20`", how, tuple(s))
        for how, s in samples_of.items()
    ]


def markdown(rows: list[Row], samples: int) -> str:
    lines = [
        f"Median of {samples} (the lock rows: of every pair).",
        "",
        "| benchmark | measured | median (ms) | note |",
        "| --- | --- | ---: | --- |",
    ]
    for r in rows:
        ms = r.median_s * 1000
        shown = f"{ms:.1f}" if ms >= 10 else f"{ms:.3f}"
        lines.append(f"| {r.name} | {r.how} | {shown} | {r.note} |")
    lines += ["", machine_line()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per row")
    parser.add_argument("--pairs", type=int, default=2000, help="lock pairs timed")
    parser.add_argument("--suspended", type=int, default=200, help="runs the sweep checks")
    parser.add_argument("--listed", type=int, default=20_000, help="runs the listing holds")
    parser.add_argument(
        "--only",
        choices=("chain", "append", "locks", "sweep", "listing", "overlap"),
        action="append",
        help="rows",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of markdown")
    args = parser.parse_args()
    why = unavailable()
    if why:
        raise SystemExit(f"bench_postgres: {why}")
    only = set(args.only or ("chain", "append", "locks", "sweep", "listing", "overlap"))
    cluster = start_cluster()
    rows: list[Row] = []
    try:
        with tempfile.TemporaryDirectory(prefix="zuke-bench-pg-") as tmp:
            root = Path(tmp)
            if "listing" in only:
                rows += bench_listing(cluster, root, args.runs, args.listed)
            if "sweep" in only:
                rows += bench_sweep(cluster, root, args.runs, args.suspended)
            if "append" in only:
                rows += bench_append(cluster, root, args.pairs)
            if "locks" in only:
                rows += bench_locks(cluster, args.pairs)
            if "overlap" in only:
                rows += bench_overlap(cluster, max(args.runs, 11))
            if "chain" in only:
                rows += bench_chain(cluster, root, args.runs)
    finally:
        cluster.stop()
    if args.json:
        print(dump_json({
            "machine": machine(),
            "rows": [
                {"name": r.name, "how": r.how, "samples": list(r.samples),
                 "median_s": r.median_s, "note": r.note}
                for r in rows
            ],
        }))  # fmt: skip
    else:
        print(markdown(rows, args.runs))


if __name__ == "__main__":
    main()
