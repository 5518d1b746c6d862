"""``zuke TARGET`` when a gate's trigger fails at once with ``.on_failure(self.rollback)``:
the process that reached the gate hands the run over and settles it itself — the rollback
runs in the same command, once, and the run ends cancelled (exit 0: handled)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke.state.filesystem import FileSystemStateStore

BUILD = """
    from zuke import Build, WaitFailed, WaitTrigger, target

    class Refused(WaitTrigger):
        descriptor = "refused"

        def check(self, ctx):
            return WaitFailed("the dispatch was refused")

    class Release(Build):
        @target
        def deploy(self, t):
            return t.executes(lambda: print("DEPLOY"))

        @target
        def approve(self, t):
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(Refused()).timeout("1h").on_failure(self.rollback))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: print("PROMOTE"))

        @target
        def rollback(self, t):
            return t.executes(lambda: print("ROLLBACK"))
"""


def test_a_gate_that_fails_at_once_runs_its_rollback_in_the_same_command(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    write_build(BUILD)
    result = cli("promote")
    # one rule: a gate failure its declared disposition handled (rolled back) exits 0, said so
    assert result.code == 0, result.text
    assert "ran rollback; the run is cancelled" in result.err
    assert result.out.count("ROLLBACK") == 1 and "PROMOTE" not in result.out
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    record = found.record
    assert record.status == "cancelled"
    assert record.targets["approve"].error == "the dispatch was refused"
    assert record.targets["rollback"].status == "succeeded"


# -- one rule for a gate failure: handled by its declared disposition, exit 0 ----------------

RULE_BUILD = """
    from pathlib import Path

    from zuke import Build, NotYet, WaitFailed, WaitTrigger, parameter, target

    class Verdict(WaitTrigger):
        descriptor = "verdict"

        def check(self, ctx):
            said = Path("verdict.txt").read_text().strip() if Path("verdict.txt").exists() else ""
            return WaitFailed("denied by @bob: not this week") if said == "deny" else NotYet()

    class Release(Build):
        on_deny = parameter("a deny's disposition").options("fail", "cancel-run", "rollback") \
            .default("fail")

        @target
        def deploy(self, t):
            return t.on_cancel(self.undeploy).executes(lambda: print("DEPLOY"))

        @target
        def approve(self, t):
            way = self.on_deny.value
            then = self.rollback if way == "rollback" else way
            return t.depends_on(self.deploy).waits_for(
                lambda s: s.on(Verdict()).timeout("1h").on_failure(then))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: print("PROMOTE"))

        @target
        def rollback(self, t):
            return t.executes(lambda: print("ROLLBACK"))

        @target
        def undeploy(self, t):
            return t.executes(lambda: print("UNDEPLOY"))
"""

#: disposition -> (exit code, the run's status, what ran after the gate failed)
RULE = {
    "fail": (1, "failed", []),
    "cancel-run": (0, "cancelled", ["UNDEPLOY"]),
    "rollback": (0, "cancelled", ["ROLLBACK", "UNDEPLOY"]),
}


def _ran(out: str) -> list[str]:
    return [w for w in ("ROLLBACK", "UNDEPLOY", "PROMOTE") if w in out]


def _only_run(tmp_path: Path) -> tuple[str, str]:
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (summary,) = store.list_runs()
    return summary.id, summary.status


@pytest.mark.parametrize("disposition", sorted(RULE))
def test_a_deny_in_the_starting_process_exits_by_the_one_rule(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path, disposition: str
) -> None:
    write_build(RULE_BUILD)
    (tmp_path / "verdict.txt").write_text("deny")
    result = cli("promote", "--on-deny", disposition)
    code, status, ran = RULE[disposition]
    assert (result.code, _only_run(tmp_path)[1]) == (code, status), result.text
    assert _ran(result.out) == ran
    if code == 0:  # reported as what the disposition did, not as an interruption
        assert "denied by @bob: not this week" in result.err and "cancelled" in result.err


@pytest.mark.parametrize("disposition", sorted(RULE))
def test_a_deny_found_by_the_sweep_exits_by_the_one_rule(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path, disposition: str
) -> None:
    write_build(RULE_BUILD)
    assert cli("promote", "--on-deny", disposition).code == 0  # suspended at the gate
    (tmp_path / "verdict.txt").write_text("deny")
    result = cli("resume", "--check", "--json")
    code, status, ran = RULE[disposition]
    report = json.loads(result.out[result.out.index("{\n") :])  # after the bodies' prints
    [entry] = report["runs"]
    assert (result.code, entry["action"], entry["result"]) == (code, "gate-failed", status)
    assert entry["handled"] == (code == 0) and report["ok"] == (code == 0)
    assert report["counts"]["failed"] == (1 if code else 0)
    assert report["counts"]["gate_failed"] == 1
    assert _ran(result.out) == ran
    assert _only_run(tmp_path)[1] == status


@pytest.mark.parametrize("disposition", sorted(RULE))
def test_a_deny_met_by_zuke_resume_exits_by_the_one_rule(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path, disposition: str
) -> None:
    write_build(RULE_BUILD)
    assert cli("promote", "--on-deny", disposition).code == 0
    run_id, _ = _only_run(tmp_path)
    (tmp_path / "verdict.txt").write_text("deny")
    result = cli("resume", run_id)
    code, status, ran = RULE[disposition]
    assert (result.code, _only_run(tmp_path)[1]) == (code, status), result.text
    assert _ran(result.out) == ran
