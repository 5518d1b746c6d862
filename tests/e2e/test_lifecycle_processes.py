"""One lifecycle for runs, checked between real ``zuke`` processes (issue 15, step 9).

Sweeps and deliverers started at the same moment against one filesystem store
(and the fake GitHub): a rate-limited dispatch is owed once, signals delivered
together are all stored and each post-gate body runs once, a signal that
arrives while the run runs is consumed without a sweep, one delivery has one
answer, and a refusal (a typo, a bad setting) leaves the record byte for byte
as it was. A signal's data never stores a secret.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.lifecycle_support import (
    APPROVAL_BUILD,
    BRANCHES_BUILD,
    FAN_BUILD,
    SECRET_BUILD,
    WORKFLOW_BUILD,
    files_holding,
    store_files,
    sweep_summary,
    zuke_lines,
)
from tests.e2e.resume_support import actions, fs_store, lines, record_of, suspend, sweep
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build
from tests.e2e.test_github_workflow_processes import DISPATCH, REPO, env_for, workflow

pytestmark = pytest.mark.e2e

SWEEPS = 6


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO]) as fake:
        yield fake


def markers_in(workdir: Path) -> Path:
    markers = workdir / "m"
    markers.mkdir()
    return markers


def test_six_sweeps_at_once_make_a_rate_limited_dispatch_once(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """Item 1: six sweeps check a github_workflow gate whose first dispatch was rate limited;
    they may all ask the gate's trigger (asking changes nothing), but its persist() before
    the dispatch takes the run's lease: exactly one dispatches, the others are held off
    (the lease held, or the gate's state moved), however long that one takes."""
    workflow(gh)
    # The first dispatch gets GitHub's secondary rate limit, with a retry-after longer than the
    # client's retry budget (60 s): the run suspends with the dispatch owed.
    gh.inject(DISPATCH, 403, times=1, retry_after=600)
    write_build(tmp_path, WORKFLOW_BUILD)
    run_id = suspend(tmp_path, ["ship"], env_for(gh))
    store = fs_store(tmp_path)
    parked = record_of(store, run_id)
    assert parked.targets["e2e"].status == "waiting"
    assert "marker" not in parked.targets["e2e"].meta  # undone: owed, not "may have landed"
    assert gh.dispatched(REPO) == []
    assert [r["status"] for r in gh.requests if r["endpoint"] == DISPATCH] == [403]

    gate = tmp_path / "client-gate"  # a sweep about to ask the trigger waits here
    gate.mkdir()
    env = {**env_for(gh), "CLIENT_GATE": str(gate)}
    procs = [spawn(["resume", "--check", "--json"], tmp_path, env) for _ in range(SWEEPS)]
    try:
        wait_until(
            lambda: (
                sum(p.poll() is not None for p in procs) >= SWEEPS - 1
                or len(lines(gate / "arrived")) > 1
            ),
            "five sweeps to finish, or two at the trigger",
        )
        (gate / "open").write_text("")
        results = [finish(p) for p in procs]
    finally:
        for proc in procs:
            kill(proc)
    seen: list[str] = []
    for code, out in results:
        assert code == 0, out
        assert "Traceback" not in out, out
        did = actions(sweep_summary(code, out), run_id)
        assert len(did) == 1 and did[0] in ("still-waiting", "skipped-held"), out
        seen.extend(did)
    assert len(lines(gate / "arrived")) >= 1  # every sweep may ask; one dispatches
    (dispatched,) = gh.dispatched(REPO)  # one workflow run
    assert [r["status"] for r in gh.requests if r["endpoint"] == DISPATCH] == [403, 200]
    # Each other sweep was held off at its persist() (skipped-held) or, reading the record
    # after the dispatch, found the run dispatched and only polled it (still-waiting).
    assert "still-waiting" in seen and set(seen) <= {"skipped-held", "still-waiting"}
    record = record_of(store, run_id)
    assert record.status == "suspended"
    assert record.targets["e2e"].meta["runId"] == dispatched["id"]
    assert record.targets["e2e"].meta["marker"] == f"zuke:{run_id}:e2e"

    gh.complete_run(dispatched["id"], "success", jobs=[("unit", "success"), ("e2e", "success")])
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert record_of(store, run_id).status == "succeeded"
    assert len(gh.dispatched(REPO)) == 1


def test_three_approvals_delivered_together_are_all_stored_and_each_item_promotes_once(
    tmp_path: Path,
) -> None:
    """Item 5: a fan-out whose items each wait for their own approval; the three approvals
    arrive at the same moment, while the first one's promotion holds the run: none is
    refused or lost, and no item's body runs twice."""
    write_build(tmp_path, FAN_BUILD)
    markers = markers_in(tmp_path)
    run_id = suspend(tmp_path, ["announce", "--markers", str(markers), "--repos", "a,b,c"])
    store = fs_store(tmp_path)
    parked = record_of(store, run_id)
    assert [parked.targets[f"batch[{r}].approve"].status for r in "abc"] == ["waiting"] * 3

    (markers / "hold").write_text("")  # whoever continues the run stays in its promotion
    argv = [["resume", run_id, "--signal", f"ok-{r}", "--data", json.dumps({"by": r})]
            for r in "abc"]  # fmt: skip
    procs = [spawn(args, tmp_path) for args in argv]
    try:
        wait_until(
            lambda: (
                len(record_of(store, run_id).signals) == 3
                or sum(p.poll() is not None for p in procs) >= 2
            ),
            "three signals stored, or two deliverers gone",
        )
        (markers / "release").write_text("")
        results = [finish(p) for p in procs]
    finally:
        for proc in procs:
            kill(proc)
    for code, out in results:
        assert code == 0, out
        assert "Traceback" not in out, out
    record = record_of(store, run_id)
    assert {name: s.data for name, s in record.signals.items()} == {
        f"ok-{r}": {"by": r} for r in "abc"
    }
    if record.status == "suspended":  # a deliverer gave up waiting: the sweep continues it
        code, summary = sweep(tmp_path)
        assert code == 0 and actions(summary, run_id) == ["resumed"], summary
        record = record_of(store, run_id)
    assert record.status == "succeeded"
    ran = [line.split()[:2] for line in lines(markers / "ran")]
    assert sorted(r for what, r in ran if what == "promote") == ["a", "b", "c"]  # once each
    assert sorted(r for what, r in ran if what == "build") == ["a", "b", "c"]  # never again
    assert [what for what, _ in ran].count("announce") == 1
    assert {row.status for row in record.targets.values()} == {"succeeded"}


def test_a_signal_delivered_while_the_run_runs_another_branch_is_consumed_without_a_sweep(
    tmp_path: Path,
) -> None:
    """Item 5 (second half): the gate is already waiting while ``slow`` still runs; the signal
    is stored although the run is running, and the run goes on through the gate by itself."""
    write_build(tmp_path, BRANCHES_BUILD)
    markers = markers_in(tmp_path)
    store = fs_store(tmp_path)
    log = tmp_path / "run.txt"
    owner = spawn(["all", "--markers", str(markers)], tmp_path, output=log)
    try:
        wait_until((markers / "started").exists, "slow to start")
        (summary,) = store.list_runs()
        run_id = summary.id
        wait_until(
            lambda: record_of(store, run_id).targets["gate"].status == "waiting",
            "the gate to wait",
        )
        assert record_of(store, run_id).status == "running"

        code, out = finish(spawn(["resume", run_id, "--signal", "go"], tmp_path))
        assert code == 0, out
        assert f"signal 'go' delivered to run {run_id}" in out, out
        assert "go" in record_of(store, run_id).signals  # stored while the run runs
        assert lines(markers / "ran") == []  # the deliverer did not run `after` itself

        (markers / "release").write_text("")
        code, _ = finish(owner)
        assert code == 0, output_of(log)
    finally:
        kill(owner)
    record = record_of(store, run_id)
    assert record.status == "succeeded", output_of(log)
    ran = lines(markers / "ran")
    assert sorted(line.split()[0] for line in ran) == ["after", "all", "slow"]
    assert ran.count(f"after {owner.pid}") == 1  # the owner passed the gate: no sweep ran


def test_the_same_signal_delivered_twice_has_one_answer(tmp_path: Path) -> None:
    """Item 21: one delivery sent twice exits 0 both times, whatever the timing: four at the
    same moment, a repeat while the first one's continuation holds the run, and a repeat
    after it (which says it was already delivered and writes nothing), by a hash of its
    data or by --signal-id; nothing runs again."""
    write_build(tmp_path, APPROVAL_BUILD)
    markers = markers_in(tmp_path)
    run_id = suspend(tmp_path, ["finish", "--markers", str(markers)])
    store = fs_store(tmp_path)
    approve = ["resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}']

    (markers / "hold").write_text("")
    same = [spawn(approve, tmp_path) for _ in range(4)]  # one delivery, four times at once
    try:
        wait_until(
            lambda: (
                lines(markers / "ran") == ["deploy", "promote"]
                and any(p.poll() is not None for p in same)
            ),
            "the promotion, and the other delivery's answer",
        )
        code, repeat = finish(spawn(approve, tmp_path))  # again, while the run is held
        assert code == 0, repeat
        assert "already delivered" in repeat and "Traceback" not in repeat, repeat
        (markers / "release").write_text("")
        for proc in same:
            code, out = finish(proc)
            assert code == 0, out
            assert "Traceback" not in out, out
    finally:
        for proc in same:
            kill(proc)
    signals = [e for e in record_of(store, run_id).events if e.tool == "signal"]
    assert [e.args["signal"] for e in signals] == ["approved"]  # stored once
    assert record_of(store, run_id).status == "suspended"  # now at the second gate
    before = store_files(tmp_path)
    code, again = finish(spawn(approve, tmp_path))
    assert code == 0, again
    assert "already delivered" in again and "Traceback" not in again, again
    assert store_files(tmp_path) == before  # the repeat wrote nothing
    assert lines(markers / "ran") == ["deploy", "promote"]

    confirm = ["resume", run_id, "--signal", "confirmed", "--signal-id", "release-42",
               "--data", '{"by": "lead"}']  # fmt: skip
    code, out = finish(spawn(confirm, tmp_path))
    assert code == 0, out
    assert record_of(store, run_id).status == "succeeded"
    code, again = finish(spawn(confirm, tmp_path))
    assert code == 0, again
    assert "already delivered" in again and "release-42" in again, again
    record = record_of(store, run_id)
    assert record.status == "succeeded"
    assert record.signals["confirmed"].id == "release-42"
    assert record.signals["confirmed"].data == {"by": "lead"}
    assert [e.tool for e in record.events].count("resume") == 2
    assert lines(markers / "ran") == ["deploy", "promote", "finish"]


def test_a_misspelt_signal_is_refused_naming_the_awaited_ones_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """Item 22: a signal no gate waits for exits 2 with one ``zuke:`` line naming the signals
    the run's gates wait for; the run's files are byte-identical afterwards."""
    write_build(tmp_path, APPROVAL_BUILD)
    markers = markers_in(tmp_path)
    run_id = suspend(tmp_path, ["finish", "--markers", str(markers)])
    before = store_files(tmp_path)

    code, out = finish(spawn(["resume", run_id, "--signal", "release-aproved"], tmp_path))
    assert code == 2, out
    (line,) = zuke_lines(out)
    assert out.strip() == line, out
    assert "'release-aproved'" in line and "'approved'" in line and "'confirmed'" in line, line
    assert store_files(tmp_path) == before
    assert record_of(fs_store(tmp_path), run_id).signals == {}

    # A signal for a gate not reached yet is still accepted (and kept for it).
    code, out = finish(spawn(["resume", run_id, "--signal", "confirmed"], tmp_path))
    assert code == 0, out
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "suspended" and "confirmed" in record.signals
    assert lines(markers / "ran") == ["deploy"]


@pytest.mark.parametrize("setting", ["ZUKE_CANCEL_POLL", "ZUKE_RUN_LEASE_TTL"])
def test_a_bad_setting_refuses_a_resume_and_a_sweep_before_the_run_moves(
    tmp_path: Path, setting: str
) -> None:
    """Item 18: a setting that does not parse refuses ``zuke resume RUN --signal`` and
    ``zuke resume --check`` (exit 2, one ``zuke:`` line) with the run still suspended and
    its files byte-identical."""
    write_build(tmp_path, APPROVAL_BUILD)
    markers = markers_in(tmp_path)
    run_id = suspend(tmp_path, ["finish", "--markers", str(markers)])
    before = store_files(tmp_path)
    bad = {setting: "banana"}

    for argv in (["resume", run_id, "--signal", "approved"], ["resume", "--check"],
                 ["resume", "--check", run_id]):  # fmt: skip
        code, out = finish(spawn(argv, tmp_path, bad))
        assert code == 2, (argv, out)
        (line,) = zuke_lines(out)
        assert out.strip() == line, (argv, out)
        assert setting in line and "banana" in line, line
        assert store_files(tmp_path) == before, argv
        assert record_of(fs_store(tmp_path), run_id).status == "suspended"
    assert lines(markers / "ran") == ["deploy"]

    # The same delivery with the setting fixed goes through: nothing was left half-done.
    code, out = finish(spawn(["resume", run_id, "--signal", "approved"], tmp_path))
    assert code == 0, out
    assert lines(markers / "ran") == ["deploy", "promote"]


def test_a_secret_in_a_signals_data_is_stored_redacted(tmp_path: Path) -> None:
    """Item 25: ``--data`` holding a secret parameter's value (the resumer has the secret):
    the value is nowhere under the store's directory nor in either process's output."""
    secret = "tok-9f2c41d7e8b3a6"
    env = {"TOKEN": secret}
    write_build(tmp_path, SECRET_BUILD)
    markers = markers_in(tmp_path)
    code, started = finish(spawn(["promote", "--markers", str(markers)], tmp_path, env))
    assert code == 0 and "is suspended" in started, started
    (summary,) = fs_store(tmp_path).list_runs()

    data = json.dumps({"token": secret, "by": "qa"})
    argv = ["resume", summary.id, "--signal", "approved", "--data", data]
    code, out = finish(spawn(argv, tmp_path, env))
    assert code == 0, out
    assert secret not in started and secret not in out, out
    assert files_holding(tmp_path / ".zuke", secret) == []
    record = record_of(fs_store(tmp_path), summary.id)
    assert record.status == "succeeded"
    assert record.signals["approved"].data == {"token": "[redacted]", "by": "qa"}
    assert lines(markers / "ran") == ["promote"]
