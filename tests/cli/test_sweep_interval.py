"""Issue 19 §3 item 3: a sweep inside a trigger's ``interval`` does not repeat the last answer
as if it were current — it says the gate was not re-checked, and when it last was."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.conftest import BuildWriter, CliRunner
from zuke.state.filesystem import FileSystemStateStore

BUILD = """
    from zuke import Build, NotYet, WaitTrigger, target

    class Ticket(WaitTrigger):
        interval_ms = 600_000  # 10m

        @property
        def descriptor(self):
            return "ticket:OPS-1"

        def check(self, ctx):
            return NotYet("ticket OPS-1 is still open")

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(Ticket()).timeout("72h"))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: None)
"""


def suspended(cli: CliRunner, write_build: BuildWriter, tmp_path: Path) -> tuple[str, str]:
    write_build(BUILD)
    ran = cli("promote")
    assert ran.code == 0, ran.text
    match = re.search(r"Run (\S+) is suspended", ran.out)
    assert match, ran.out
    run_id = match.group(1)
    found = FileSystemStateStore(tmp_path / ".zuke" / "runs").get_run(run_id)
    assert found is not None
    waiting = found.record.targets["approve"].waiting_for
    assert waiting is not None and waiting.checked_at is not None
    return run_id, waiting.checked_at


def test_a_sweep_inside_the_interval_says_the_gate_was_not_rechecked_and_when_it_was(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    run_id, stamp = suspended(cli, write_build, tmp_path)
    text = cli("resume", "--check")
    assert text.code == 0, text.text
    assert text.out.splitlines()[0] == (
        f"{run_id} Release [approve]: still-waiting → suspended — not re-checked "
        f"(interval 10m; last checked {stamp}); its last answer: ticket OPS-1 is still open"
    )
    report = json.loads(cli("resume", "--check", "--json").out)
    [entry] = report["runs"]
    assert entry["rechecked"] is False and entry["last_checked"] == stamp
    assert entry["detail"].startswith("not re-checked (interval 10m; last checked ")


def test_a_gate_asked_in_this_sweep_is_reported_as_rechecked(
    cli: CliRunner, write_build: BuildWriter, tmp_path: Path
) -> None:
    source = BUILD.replace("interval_ms = 600_000  # 10m", "interval_ms = None")
    write_build(source)
    assert cli("promote").code == 0
    [entry] = json.loads(cli("resume", "--check", "--json").out)["runs"]
    assert entry["rechecked"] is True and entry["last_checked"] is None
    assert entry["detail"] == "ticket OPS-1 is still open"
