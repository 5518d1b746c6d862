"""``pg_ctl restart -m immediate`` under real ``zuke`` processes on ``ZUKE_STATE=postgresql://``.

The cluster here is the module's own (a restart breaks every connection to
it, and the session's cluster serves other tests' long-lived pools). A
restart kills every backend at once, as a crash does; Postgres recovers and
listens again on the same port.

* A run of many targets restarted under it three times goes on: its writes
  (and its lease's renewals) are run again on fresh connections, a write
  whose answer was lost is looked up rather than sent twice, and it ends
  with its record whole — every target once, the journal folded to the
  same record — and its lease given back (DBOS#716: a restart during
  recovery stranded workflows PENDING).
* A resume whose continuing compare-and-swap committed but lost its answer
  (a proxy drops the connection then) reads back that it won, and
  continues the run itself, once.
* Eight resumers of one run, and three sweeps over several runs, caught by
  a restart: each run is continued exactly once, its side effect made
  once (DBOS#759: duplicate side-effecting runs). A process that could not
  reach the server says so in one line and continues nothing; a sweep
  afterwards picks up what it left.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.resume_support import MARKER_WRITER, lines, record_of
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build
from tests.e2e.test_resume_processes import RELEASE_BUILD, SATISFIED_BUILD
from tests.pg_support import LosingProxy, PgCluster
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunRecord

pytestmark = pytest.mark.e2e

TARGETS = 150
RESTART_AT = (30, 70, 110)
RESUMERS = 8
#: short enough that a lease a failed process left lapses soon, long enough to ride a restart
LEASE = {"ZUKE_RUN_LEASE_TTL": "5s"}


@pytest.fixture
def pg_url(restartable: PgCluster) -> str:
    return restartable.create_database()


@pytest.fixture
def store(pg_url: str) -> Iterator[PostgresStateStore]:
    s = PostgresStateStore(pg_url)
    yield s
    s.close()


def chain_build(n: int) -> str:
    """``t000 <- … <- t{n-1} <- last``: each body writes its name; ``last`` waits for the test."""
    source = [MARKER_WRITER, "    import os, pathlib", "    from zuke import Build, target", ""]
    source += ["    MARKERS = pathlib.Path(os.environ['MARKERS'])", "", "    class Chain(Build):"]
    for i in range(n):
        deps = f".depends_on(self.t{i - 1:03d})" if i else ""
        source += [
            "        @target",
            f"        def t{i:03d}(self, t):",
            f"            return t{deps}.executes(",
            f"                lambda: append_line(MARKERS / 'progress', 't{i:03d}'))",
        ]
    source += [
        "        @target",
        "        def last(self, t):",
        f"            return t.depends_on(self.t{n - 1:03d}).executes(",
        "                lambda: wait_for(MARKERS / 'finish', 'the finish marker'))",
    ]
    return "\n".join(source)


def test_a_run_restarted_under_three_times_completes_with_its_record_whole(
    tmp_path: Path, restartable: PgCluster, pg_url: str, store: PostgresStateStore
) -> None:
    write_build(tmp_path, chain_build(TARGETS))
    markers = tmp_path / "m"
    markers.mkdir()
    env = {"ZUKE_STATE": pg_url, "MARKERS": str(markers), **LEASE}
    log = tmp_path / "run.out"
    proc = spawn(["last"], tmp_path, env, output=log)
    try:
        for at in RESTART_AT:
            wait_until(lambda at=at: len(lines(markers / "progress")) >= at,  # type: ignore[misc]
                       f"{at} targets to run")  # fmt: skip
            restartable.restart()
            assert proc.poll() is None, output_of(log)  # restarted under it: it still runs
        wait_until(lambda: len(lines(markers / "progress")) == TARGETS, "every target to run")
        (markers / "finish").write_text("")
        code = proc.wait(timeout=120)
    finally:
        kill(proc)
    out = output_of(log)
    assert code == 0, out
    assert "could not record" not in out and "Traceback" not in out, out
    assert lines(markers / "progress") == [f"t{i:03d}" for i in range(TARGETS)]  # each once
    (summary,) = store.list_runs()
    record = record_of(store, summary.id)
    assert_whole(record, TARGETS + 1)
    assert store.list_locks() == []  # the run's lease given back


def assert_whole(record: RunRecord, targets: int) -> None:
    """Succeeded, not degraded, every target succeeded with its times, no event twice."""
    assert (record.status, record.degraded) == ("succeeded", False), record.status
    assert len(record.targets) == targets
    for name, row in record.targets.items():
        assert row.status == "succeeded", (name, row)
        assert row.started_at and row.ended_at, (name, row)
    events = [(e.at, e.tool, e.outcome, e.detail) for e in record.events]
    assert len(events) == len(set(events)), events


# ------------------------------------------------------------------ resumes caught by a restart


def suspended(workdir: Path, env: dict[str, str], markers: Path) -> str:
    markers.mkdir()
    code, out = finish(spawn(["promote", "--markers", str(markers)], workdir, env))
    assert code == 0 and "is suspended" in out, out
    return out.split("Run ", 1)[1].split(" ", 1)[0]


def settle_leftovers(workdir: Path, env: dict[str, str], store: PostgresStateStore,
                     run_ids: list[str]) -> None:  # fmt: skip
    """A process the restart refused continued nothing: sweeps pick up what is left."""

    def settled() -> bool:
        if all(record_of(store, r).status == "succeeded" for r in run_ids):
            return True
        code, out = finish(spawn(["resume", "--check"], workdir, env))
        assert code in (0, 1), out
        return False

    wait_until(settled, "every run to be continued", timeout=120)


def one_line_or_success(code: int, out: str) -> None:
    """A process caught by the restart exits 0, or says what failed in one ``zuke:`` line."""
    assert "Traceback" not in out, out
    if code != 0:
        errors = [line for line in out.splitlines() if line.startswith("zuke: ")]
        assert errors, out


@pytest.mark.parametrize(
    "moment",
    ["signal-stored", "continued"],
    ids=["restart-as-the-signal-lands", "restart-as-the-run-is-continued"],
)
def test_eight_resumers_caught_by_a_restart_continue_the_run_once(
    tmp_path: Path, restartable: PgCluster, pg_url: str, store: PostgresStateStore, moment: str
) -> None:
    write_build(tmp_path, RELEASE_BUILD)
    env = {"ZUKE_STATE": pg_url, **LEASE}
    markers = tmp_path / "m"
    run_id = suspended(tmp_path, env, markers)
    reached: Callable[[RunRecord], bool] = (
        (lambda r: "approved" in r.signals) if moment == "signal-stored"
        else (lambda r: r.status != "suspended")
    )  # fmt: skip
    argv = ["resume", run_id, "--signal", "approved", "--data"]
    procs = [spawn([*argv, json.dumps({"by": i})], tmp_path, env) for i in range(RESUMERS)]
    try:
        wait_until(lambda: reached(record_of(store, run_id)), f"the run's {moment}")
        restartable.restart()
        for proc in procs:
            one_line_or_success(*finish(proc, timeout=120))
    finally:
        for proc in procs:
            kill(proc)
    settle_leftovers(tmp_path, env, store, [run_id])
    promoted = lines(markers / "promoted")
    assert len(promoted) == 1, f"the promotion ran {len(promoted)} times"
    record = record_of(store, run_id)
    assert_whole(record, 3)
    assert [e.tool for e in record.events].count("resume") == 1
    assert record.signals["approved"].data == json.loads(promoted[0])


def test_three_sweeps_caught_by_a_restart_resume_each_run_once(
    tmp_path: Path, restartable: PgCluster, pg_url: str, store: PostgresStateStore
) -> None:
    write_build(tmp_path, SATISFIED_BUILD)
    env = {"ZUKE_STATE": pg_url, **LEASE}
    markers = tmp_path / "m"
    markers.mkdir()
    parking = [spawn(["ship", "--markers", str(markers)], tmp_path, env) for _ in range(4)]
    for proc in parking:
        code, out = finish(proc)
        assert code == 0 and "is suspended" in out, out
    run_ids = [s.id for s in store.list_runs()]
    (markers / "open").write_text("")
    sweepers: list[subprocess.Popen[str]] = [
        spawn(["resume", "--check"], tmp_path, env) for _ in range(3)
    ]
    try:
        wait_until(
            lambda: any(record_of(store, r).status != "suspended" for r in run_ids),
            "a sweep to continue a run",
        )
        restartable.restart()
        for proc in sweepers:
            one_line_or_success(*finish(proc, timeout=120))
    finally:
        for proc in sweepers:
            kill(proc)
    settle_leftovers(tmp_path, env, store, run_ids)
    assert sorted(lines(markers / "shipped")) == sorted(run_ids)  # each shipped once
    for run_id in run_ids:
        record = record_of(store, run_id)
        assert_whole(record, 2)
        assert [e.tool for e in record.events].count("resume") == 1


def test_a_resume_whose_continuation_lost_its_answer_continues_the_run_itself_once(
    tmp_path: Path, restartable: PgCluster, pg_url: str, store: PostgresStateStore
) -> None:
    # The connection breaks right after the server committed the compare-and-swap that
    # continues the run (its "resume" event): the resumer must read back that it won.
    write_build(tmp_path, RELEASE_BUILD)
    markers = tmp_path / "m"
    run_id = suspended(tmp_path, {"ZUKE_STATE": pg_url, **LEASE}, markers)
    proxy = LosingProxy(restartable.port)
    try:
        proxy.arm('"tool":"resume"', "answer")
        env = {"ZUKE_STATE": pg_url.replace(f":{restartable.port}/", f":{proxy.port}/"), **LEASE}
        argv = ["resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}']
        code, out = finish(spawn(argv, tmp_path, env))
    finally:
        proxy.close()
    assert proxy.tripped.is_set()
    assert code == 0, out
    assert [json.loads(line) for line in lines(markers / "promoted")] == [{"by": "qa"}]
    record = record_of(store, run_id)
    assert_whole(record, 3)
    assert [e.tool for e in record.events].count("resume") == 1
