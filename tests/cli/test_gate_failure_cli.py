"""``zuke TARGET`` when a gate's trigger fails at once with ``.on_failure(self.rollback)``:
the process that reached the gate hands the run over and settles it itself — the rollback
runs in the same command, once, and the run ends cancelled."""

from __future__ import annotations

from pathlib import Path

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
    assert result.code != 0, result.text  # not a success: the run was rolled back
    assert result.out.count("ROLLBACK") == 1 and "PROMOTE" not in result.out
    store = FileSystemStateStore(tmp_path / ".zuke" / "runs")
    (summary,) = store.list_runs()
    found = store.get_run(summary.id)
    assert found is not None
    record = found.record
    assert record.status == "cancelled"
    assert record.targets["approve"].error == "the dispatch was refused"
    assert record.targets["rollback"].status == "succeeded"
