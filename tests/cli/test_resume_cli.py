"""``zuke resume`` and ``zuke resume --check`` in-process, with a build file in a temp dir."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliResult, CliRunner
from zuke._errors import StoreUnavailableError
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunDelta, RunRecord
from zuke.state.update import update_run

BUILD = """
    import json
    from zuke import Build, external_signal, parameter, resume_when, target

    class Release(Build):
        repo = parameter("service").default("api")

        @target
        def deploy(self, t):
            return t.executes(lambda ctx: ctx.state.set({{"at": "sit-" + self.repo.value}}))

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(external_signal("approved")).timeout("72h"){on_timeout})

        @target
        def promote(self, t):
            def body(ctx):
                signal = ctx.signals["approved"]
                print("PROMOTE", self.repo.value, json.dumps(signal.data), signal.received_at)
            return t.depends_on(self.approve{extra_dep}).executes(body)

        @target
        def rollback(self, t):
            return t.executes(lambda ctx: print("ROLLBACK", ctx.state_of("deploy").get()["at"]))
{extra}
"""

SMOKE = """
        @target
        def smoke(self, t):
            return t.executes(lambda: print("SMOKE"))
"""


def build_source(on_timeout: str = "", drift: bool = False) -> str:
    return BUILD.format(
        on_timeout=on_timeout,
        extra_dep=", self.smoke" if drift else "",
        extra=SMOKE if drift else "",
    )


@pytest.fixture
def store(tmp_path: Path) -> FileSystemStateStore:
    return FileSystemStateStore(tmp_path / ".zuke" / "runs")


def suspend(cli: CliRunner, write_build: BuildWriter, on_timeout: str = "") -> str:
    write_build(build_source(on_timeout))
    result = cli("promote")
    assert result.code == 0, result.text
    match = re.search(r"Run (\S+) is suspended\. Resume it with:", result.out)
    assert match, result.out
    return match.group(1)


def record(store: FileSystemStateStore, run_id: str) -> RunRecord:
    found = store.get_run(run_id)
    assert found is not None
    return found.record


def one_line_error(result: CliResult, code: int) -> str:
    assert result.code == code, result.text
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zuke: "), result.err
    return lines[0]


def test_a_suspended_run_exits_0_and_prints_the_commands_that_resume_it(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    write_build(build_source())
    result = cli("promote")
    assert result.code == 0
    run_id = re.search(r"Run (\S+) is suspended", result.out).group(1)  # type: ignore[union-attr]
    assert "⏸ approve waiting for signal:approved" in result.out
    assert "⏸ Build suspended — 1 target(s) waiting" in result.out
    assert f"zuke resume {run_id} --signal approved --data '{{}}'" in result.out
    assert f"zuke resume --check {run_id}" in result.out
    assert "# approve waits for signal:approved until 20" in result.out
    assert record(store, run_id).status == "suspended"


def test_zuke_resume_delivers_the_signal_and_the_payload_reaches_the_dependent(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    result = cli("resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}')
    assert result.code == 0, result.text
    assert re.search(r'PROMOTE api \{"by": "qa"\} 20\d\d-', result.out)
    assert "✔ Build succeeded" in result.out
    assert record(store, run_id).status == "succeeded"


def test_a_repeated_delivery_exits_0_and_does_nothing(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    args = ("resume", run_id, "--signal", "approved", "--data", '{"by": "qa"}')
    assert cli(*args).code == 0
    before = store.get_run(run_id)
    again = cli(*args)
    assert again.code == 0 and "PROMOTE" not in again.out
    assert "already delivered" in again.err
    assert store.get_run(run_id) == before
    other = cli("resume", run_id, "--signal", "approved", "--data", '{"by": "ops"}')
    assert 'is "succeeded", not suspended' in one_line_error(other, 1)


def test_a_resume_of_a_run_someone_else_resumed_exits_1(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    line = one_line_error(cli("resume", run_id), 1)
    assert f"run {run_id} is running" in line and "nothing to do" in line


def test_a_signal_for_a_running_run_is_stored_and_exits_0(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at, status="running"))
    result = cli("resume", run_id, "--signal", "approved", "--data", '"qa"')
    assert result.code == 0, result.text
    assert "signal 'approved' delivered" in result.err
    assert record(store, run_id).signals["approved"].data == "qa"


def test_a_signal_no_gate_waits_for_is_refused_with_exit_2_and_not_stored(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    before = store.get_run(run_id)
    line = one_line_error(cli("resume", run_id, "--signal", "aproved", "--data", "1"), 2)
    assert "no gate waiting for the signal 'aproved'" in line and "'approved'" in line
    assert store.get_run(run_id) == before


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("{by: qa}", "--data is not JSON (line 1, column 2)"),
        ("NaN", "--data is not JSON"),
        ('"' + "x" * 65_536 + '"', "the limit is 65536 (64 KiB)"),
    ],
    ids=["not-json", "nan", "too-big"],
)
def test_bad_data_is_refused_in_one_line_and_nothing_is_written(
    cli: CliRunner,
    write_build: BuildWriter,
    store: FileSystemStateStore,
    data: str,
    message: str,
) -> None:
    run_id = suspend(cli, write_build)
    before = Path(store.path_of(run_id)).read_bytes()
    line = one_line_error(cli("resume", run_id, "--signal", "approved", "--data", data), 2)
    assert message in line and "x" * 100 not in line
    assert Path(store.path_of(run_id)).read_bytes() == before


def test_an_unknown_run_id_exits_1(cli: CliRunner, write_build: BuildWriter) -> None:
    suspend(cli, write_build)
    assert 'no run "nope"' in one_line_error(cli("resume", "nope", "--signal", "approved"), 1)
    assert 'no run "nope"' in one_line_error(cli("resume", "--check", "nope"), 1)


def test_a_run_that_is_not_suspended_exits_1_naming_its_status(
    cli: CliRunner, write_build: BuildWriter
) -> None:
    run_id = suspend(cli, write_build)
    assert cli("resume", run_id, "--signal", "approved").code == 0
    line = one_line_error(cli("resume", run_id), 1)
    assert f'run {run_id} is "succeeded", not suspended' in line


def test_a_changed_graph_is_refused_unless_force_graph(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    write_build(build_source(drift=True))
    line = one_line_error(cli("resume", run_id, "--signal", "approved"), 1)
    assert "smoke was added" in line and "--force-graph" in line
    assert record(store, run_id).status == "suspended"
    result = cli("resume", run_id, "--signal", "approved", "--force-graph")
    assert result.code == 0, result.text
    assert "SMOKE" in result.out and "PROMOTE" in result.out


def test_a_degraded_record_is_refused_unless_resume_degraded(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    update_run(store, run_id, lambda r: RunDelta(updated_at=r.updated_at, degraded=True))
    line = one_line_error(cli("resume", run_id, "--signal", "approved"), 1)
    assert "degraded" in line and "--resume-degraded" in line
    assert cli("resume", run_id, "--signal", "approved", "--resume-degraded").code == 0


def test_the_actor_and_a_parameter_override_apply_to_the_resume(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    result = cli("resume", run_id, "--signal", "approved", "--actor", "qa-lead", "--repo", "web")
    assert result.code == 0, result.text
    assert "PROMOTE web" in result.out
    found = record(store, run_id)
    assert found.actor != "qa-lead"  # the starter, kept for ever; the resumer is in its event
    assert [e.actor for e in found.events if e.tool == "resume"] == ["qa-lead"]


def test_resume_needs_a_run_id_and_data_needs_a_signal(
    cli: CliRunner, write_build: BuildWriter
) -> None:
    write_build(build_source())
    assert "needs a RUN_ID" in one_line_error(cli("resume"), 2)
    assert "go with --signal NAME" in one_line_error(cli("resume", "r1", "--data", "{}"), 2)


def expire(store: FileSystemStateStore, run_id: str) -> None:
    """Move the gate's deadline into the past (the clock is the system's here)."""

    def change(r: RunRecord) -> RunDelta:
        row = r.targets["approve"]
        assert row.waiting_for is not None
        past = replace(row.waiting_for, deadline="2000-01-01T00:00:00.000Z")
        rows = {"approve": replace(row, waiting_for=past)}
        return RunDelta(updated_at=r.updated_at, targets=rows)

    update_run(store, run_id, change)


@pytest.mark.parametrize("how", ["resume", "check"])
@pytest.mark.parametrize(
    ("on_timeout", "status", "rolled_back"),
    [
        ("", "failed", False),
        ('.on_timeout("cancel-run")', "cancelled", False),
        (".on_timeout(self.rollback)", "cancelled", True),
    ],
    ids=["fail", "cancel-run", "rollback"],
)
def test_a_gate_past_its_deadline_takes_its_disposition(
    cli: CliRunner,
    write_build: BuildWriter,
    store: FileSystemStateStore,
    how: str,
    on_timeout: str,
    status: str,
    rolled_back: bool,
) -> None:
    run_id = suspend(cli, write_build, on_timeout)
    expire(store, run_id)
    args = ("resume", run_id) if how == "resume" else ("resume", "--check", "--json")
    result = cli(*args)
    assert record(store, run_id).status == status
    assert ("ROLLBACK sit-api" in result.out) == rolled_back
    # one rule: a timeout handled by its declared disposition exits 0, "fail" exits 1
    assert result.code == (1 if status == "failed" else 0), result.text
    if how == "resume":
        assert "gate 'approve' timed out at 2000-01-01T00:00:00.000Z" in result.err
    else:
        report = json.loads(result.out[result.out.index("{\n") :])
        [entry] = report["runs"]
        assert (entry["action"], entry["result"], entry["gate"]) == ("timed-out", status, "approve")
        assert entry["handled"] == (status != "failed")
    line = one_line_error(cli("resume", run_id, "--signal", "approved"), 1)
    assert "timed out" in line and "was not delivered" in line


def test_the_sweep_json_lists_each_run_and_the_counts(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    waiting = suspend(cli, write_build)
    expired = suspend(cli, write_build)
    expire(store, expired)
    result = cli("resume", "--check", "--json")
    assert result.code == 1  # a run timed out into failure
    report = json.loads(result.out)
    runs = {r["id"]: r for r in report["runs"]}
    assert set(runs[waiting]) == {
        "id", "build", "gate", "action", "result", "detail", "error", "rechecked", "last_checked",
        "handled",
    }  # fmt: skip
    assert (runs[waiting]["action"], runs[waiting]["result"]) == ("still-waiting", "suspended")
    assert runs[waiting]["build"] == "Release" and runs[waiting]["gate"] == "approve"
    assert (runs[expired]["action"], runs[expired]["result"]) == ("timed-out", "failed")
    assert report["counts"] == {
        "checked": 2, "resumed": 0, "still_waiting": 1, "timed_out": 1, "gate_failed": 0,
        "deferred": 0,
        "failed": 1, "reaped": 0, "skipped": 0, "errors": 0, "not_checked": 0,
    }  # fmt: skip
    assert report["ok"] is False


def test_the_sweep_prints_a_line_per_run_and_a_closing_count(
    cli: CliRunner, write_build: BuildWriter
) -> None:
    run_id = suspend(cli, write_build)
    result = cli("resume", "--check")
    assert result.code == 0, result.text
    lines = result.out.strip().splitlines()
    assert lines[0].startswith(f"{run_id} Release [approve]: still-waiting → suspended")
    assert lines[-1].startswith("Checked 1 suspended run(s): 0 resumed, 1 still waiting")


def test_a_corrupt_record_is_one_line_and_exit_1(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore
) -> None:
    run_id = suspend(cli, write_build)
    path = Path(store.path_of(run_id))
    text = path.read_text().replace('"trigger":"signal:approved"', '"trigger":12345')
    path.write_text(text)
    line = one_line_error(cli("resume", run_id, "--signal", "approved"), 1)
    assert line.startswith("zuke: state: ") and "trigger" in line
    sweep = cli("resume", "--check")
    assert sweep.code == 1 and f"{run_id} Release: failed" in sweep.out
    assert path.read_text() == text


def test_a_sweep_whose_store_fails_says_so_in_one_line_and_leaves_the_run(
    cli: CliRunner, write_build: BuildWriter, store: FileSystemStateStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    run_id = suspend(cli, write_build)
    expire(store, run_id)  # its timeout is a change: the sweep must write
    before = record(store, run_id)

    def down(*_args: object, **_kwargs: object) -> None:
        raise StoreUnavailableError("state: the store is down (a test)")

    with monkeypatch.context() as down_now:  # the lease is taken, then every write fails
        for write in ("put_run", "append_run", "append_run_known"):
            down_now.setattr(FileSystemStateStore, write, down)
        result = cli("resume", "--check")
    assert result.code == 1, result.text
    assert f"{run_id} Release: failed → suspended — state: the store is down" in result.out
    errors = [line for line in result.err.splitlines() if line.startswith("zuke: ")]
    assert errors == [
        "zuke: the state store failed for 1 run(s) (see above); each is left as it was: "
        "run `zuke resume --check` again once the store answers"
    ]
    assert record(store, run_id) == before  # nothing half-written
    later = cli("resume", "--check")  # the store is back: the next sweep takes the run up
    assert f"{run_id} Release [approve]: timed-out → failed" in later.out
    assert "state store failed" not in later.err


def test_a_gate_with_state_off_is_refused_in_one_line(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    write_build(build_source())
    line = one_line_error(cli("promote", env={"ZUKE_STATE": "off"}), 1)
    assert "ZUKE_STATE=off" in line and ".waits_for()" in line
    assert not (tmp_path / ".zuke").exists()
