"""Suspend in one ``zuke`` process, resume from others: payloads, exactly-once, deadlines."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.postgres_axis import STORE_AXIS, axis_store
from tests.e2e.resume_support import (
    MARKER_WRITER,
    OBSERVER,
    fs_store,
    lines,
    record_of,
    suspend,
    wait_for_lease_to_lapse,
    wait_past,
)
from tests.e2e.support import finish, kill, spawn, wait_until, write_build
from tests.serve.support import TOKEN, running_server
from zuke._clock import parse_iso
from zuke.state._protocol import LockAcquired, StateStore
from zuke.state.http import HttpStateStore

pytestmark = pytest.mark.e2e

#: What a deliverer that did not continue the run says: its signal is stored (or another
#: delivery's stands), and the holder or the run's owner takes it.
DELIVERED = re.compile(r"^zuke: signal 'approved' (delivered to|was already delivered to) run ",
                       re.MULTILINE)  # fmt: skip

RESUMERS = 8
ROUNDS = 10
#: rounds on Postgres: the race is the same, the suite's time is not free
PG_ROUNDS = 3

RELEASE_BUILD = (
    MARKER_WRITER
    + """
    import json, pathlib
    from zuke import Build, external_signal, parameter, target

    class Release(Build):
        markers = parameter("marker directory").required()
        budget = parameter("the run's deadline").default("1h")

        def deadline(self):
            return self.budget.value

        @target
        def deploy(self, t):
            return t.executes(lambda: None)

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("1h")
            )

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(self._promote)

        def _promote(self, ctx):
            markers = pathlib.Path(self.markers.value)
            append_line(markers / "promoted", json.dumps(ctx.signals["approved"].data))
            if (markers / "hold").exists():
                wait_for(markers / "release", "the release marker")
            if (markers / "fail").exists():
                raise RuntimeError("promotion failed (the test asked for it)")
"""
)


def test_a_run_suspended_in_one_process_is_resumed_from_another_and_the_payload_arrives(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, RELEASE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(markers)])
    store = fs_store(tmp_path)
    parked = record_of(store, run_id)
    assert parked.status == "suspended"
    assert parked.targets["approve"].status == "waiting"
    assert not (markers / "promoted").exists()

    code, out = finish(
        spawn(["resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}'], tmp_path)
    )
    assert code == 0, out
    assert [json.loads(line) for line in lines(markers / "promoted")] == [{"by": "qa"}]
    done = record_of(store, run_id)
    assert done.status == "succeeded"
    assert {n: r.status for n, r in done.targets.items()} == dict.fromkeys(
        ("deploy", "approve", "promote"), "succeeded"
    )
    assert done.signals["approved"].data == {"by": "qa"}


def race_round(workdir: Path, store: StateStore, run_id: str, markers: Path,
               env: dict[str, str] | None) -> None:  # fmt: skip
    """Eight deliveries of one signal at once: one promotion, with the data of the delivery
    that was stored first; every deliverer exits 0 (the gate it meant to open opens once)."""
    (markers / "hold").write_text("")
    argv = ["resume", run_id, "--signal", "approved", "--data"]
    procs = [spawn([*argv, json.dumps({"by": i})], workdir, env) for i in range(RESUMERS)]
    try:
        wait_until(
            lambda: sum(p.poll() is not None for p in procs) >= RESUMERS - 1,
            f"{RESUMERS - 1} deliverers of {run_id} that did not continue it to exit",
        )
        others = [p for p in procs if p.poll() is not None]
        assert len(others) == RESUMERS - 1
        for proc in others:
            code, out = finish(proc)
            assert code == 0, out
            assert DELIVERED.search(out), out
            assert run_id in out and "Traceback" not in out, out
        promoted = lines(markers / "promoted")
        assert len(promoted) == 1, f"the promotion body ran {len(promoted)} times"
        (markers / "release").write_text("")
        (winner,) = [p for p in procs if p not in others]
        code, out = finish(winner)
        assert code == 0, out
    finally:
        for proc in procs:
            kill(proc)
    assert len(lines(markers / "promoted")) == 1
    record = record_of(store, run_id)
    assert record.status == "succeeded"
    assert [e.tool for e in record.events].count("resume") == 1
    assert [e.tool for e in record.events].count("signal") == 1  # the first stands
    assert record.signals["approved"].data == json.loads(lines(markers / "promoted")[0])


def suspend_rounds(
    workdir: Path, env: dict[str, str] | None, count: int = ROUNDS
) -> list[tuple[str, Path]]:
    """One suspended run per round, suspended by processes started together."""
    rounds = []
    procs: list[tuple[subprocess.Popen[str], Path]] = []
    for n in range(count):
        markers = workdir / f"round-{n}"
        markers.mkdir()
        procs.append((spawn(["promote", "--markers", str(markers)], workdir, env), markers))
    for proc, markers in procs:
        code, out = finish(proc)
        assert code == 0 and "is suspended" in out, out
        run_id = out.split("Run ", 1)[1].split(" ", 1)[0]
        rounds.append((run_id, markers))
    return rounds


@STORE_AXIS
def test_eight_processes_resume_one_run_and_the_promotion_runs_exactly_once(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    write_build(tmp_path, RELEASE_BUILD)
    axis = axis_store(kind, tmp_path, request)
    rounds = ROUNDS if kind == "fs" else PG_ROUNDS
    for run_id, markers in suspend_rounds(tmp_path, axis.env, rounds):
        race_round(tmp_path, axis.store, run_id, markers, axis.env)


def test_eight_processes_resume_one_run_exactly_once_against_zuke_serve(tmp_path: Path) -> None:
    write_build(tmp_path, RELEASE_BUILD)
    with running_server(tmp_path) as server:
        env = {"ZUKE_STATE_URL": server.url, "ZUKE_STATE_TOKEN": TOKEN}
        with HttpStateStore(server.url, token=TOKEN) as store:
            for run_id, markers in suspend_rounds(tmp_path, env):
                race_round(tmp_path, store, run_id, markers, env)


def test_the_deadline_is_pushed_forward_by_the_time_the_run_was_parked(tmp_path: Path) -> None:
    write_build(tmp_path, RELEASE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(markers), "--budget", "10m"])
    store = fs_store(tmp_path)
    parked = record_of(store, run_id)
    created, before = parse_iso(parked.created_at), parse_iso(parked.deadline_at or "")
    assert created is not None and before == created + 10 * 60_000
    parked_at = parse_iso(parked.updated_at)
    assert parked_at is not None
    # Let the run stay parked a measurable while (a poll on the clock, not a sleep).
    wait_past(_later(parked.updated_at, 1500), "1.5 s of parking")

    code, out = finish(spawn(["resume", run_id, "--signal", "approved"], tmp_path))
    assert code == 0, out
    done = record_of(store, run_id)
    (resumed,) = [e for e in done.events if e.tool == "resume"]
    resumed_at, after = parse_iso(resumed.at), parse_iso(done.deadline_at or "")
    assert resumed_at is not None and after is not None
    parked_for = resumed_at - parked_at
    assert parked_for >= 1500
    assert after == before + parked_for
    assert done.status == "succeeded"


def _later(stamp: str, ms: int) -> str:
    from zuke._clock import iso

    moment = parse_iso(stamp)
    assert moment is not None
    return iso(moment + ms)


SATISFIED_BUILD = (
    MARKER_WRITER
    + """
    import pathlib
    from zuke import Build, parameter, resume_when, target

    class Batch(Build):
        markers = parameter("marker directory").required()

        @target
        def ready(self, t):
            flag = pathlib.Path(self.markers.value) / "open"
            return t.waits_for(lambda s: s.on(resume_when(flag.exists)))

        @target
        def ship(self, t):
            return t.depends_on(self.ready).executes(
                lambda ctx: append_line(pathlib.Path(self.markers.value) / "shipped", ctx.run_id)
            )

        @target
        def work(self, t):
            markers = pathlib.Path(self.markers.value)  # a definition reads a required param
            return t.executes(lambda: append_line(markers / "worked", "") or wait_for(
                markers / "go", "the go marker"))
"""
)


@STORE_AXIS
def test_three_sweeps_at_once_resume_each_run_once_though_definitions_read_a_required_param(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    write_build(tmp_path, SATISFIED_BUILD)
    axis = axis_store(kind, tmp_path, request)
    env = axis.env
    markers = tmp_path / "m"
    markers.mkdir()
    parking = [spawn(["ship", "--markers", str(markers)], tmp_path, env) for _ in range(ROUNDS - 1)]
    for proc in parking:
        code, out = finish(proc)
        assert code == 0 and "is suspended" in out, out
    # On Postgres the first call (import psycopg, connect, check the schema) takes part of the
    # lease's first period: a 1 s lease may lapse before its first renewal on a busy machine.
    lease = "1s" if kind == "fs" else "3s"
    dead = spawn(["work", "--state", "--markers", str(markers)], tmp_path,
                 axis.with_env({"ZUKE_RUN_LEASE_TTL": lease}))  # fmt: skip
    try:
        wait_until(lambda: (markers / "worked").exists(), "work's body to start")
    finally:
        kill(dead)
    (markers / "open").write_text("")
    (markers / "go").write_text("")
    store = axis.store
    (dead_id,) = [s.id for s in store.list_runs() if s.status == "running"]
    wait_for_lease_to_lapse(store, dead_id)

    sweepers = [spawn(["resume", "--check", "--json"], tmp_path, env) for _ in range(3)]
    resumed: list[str] = []
    for proc in sweepers:
        code, out = finish(proc)
        assert code == 0, out
        summary = json.loads(out[out.index("{\n") :])
        resumed += [e["id"] for e in summary["runs"] if e["action"] == "resumed"]
    runs = {s.id for s in store.list_runs()}
    assert len(runs) == ROUNDS
    assert sorted(resumed) == sorted(runs)  # each run resumed by exactly one sweep
    assert sorted(lines(markers / "shipped")) == sorted(runs - {dead_id})
    assert {record_of(store, run_id).status for run_id in runs} == {"succeeded"}
    assert [e.tool for e in record_of(store, dead_id).events].count("reap") == 1


def test_a_resume_whose_run_fails_gives_the_lease_back_at_once(tmp_path: Path) -> None:
    write_build(tmp_path, RELEASE_BUILD)
    markers = tmp_path / "markers"
    markers.mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(markers)])
    (markers / "fail").write_text("")
    code, out = finish(spawn(["resume", run_id, "--signal", "approved"], tmp_path))
    assert code == 1, out
    assert "promotion failed" in out, out
    store = fs_store(tmp_path)
    assert record_of(store, run_id).status == "failed"
    taken = store.acquire_lock(f"zuke-run-{run_id}", OBSERVER, 1000)
    assert isinstance(taken, LockAcquired), taken  # released, not left to lapse
