"""Issue 19 §3 item 10: live progress (rich) only on a terminal — a sweep over many runs shows
runs checked of total, stepping aside while a run it resumed prints; piped or ``--json``,
nothing but the report. (A fan-out's live line: tests/cli/test_fan_out_cli.py.)"""

from __future__ import annotations

import asyncio
import io
import json
import re
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke.cli.console import ConsoleReporter
from zuke.cli.progress import PauseOnRun, SweepProgress, on_terminal
from zuke.cli.resume_cmd import run_resume

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")

BUILD = """
    from pathlib import Path
    from zuke import Build, resume_when, target

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(
                lambda s: s.on(resume_when(lambda: Path("GO").exists())).timeout("72h"))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: print("PROMOTED"))
"""


class Terminal(io.StringIO):
    """What rich and zuke take for a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def three_waiting(
    write_build: BuildWriter, cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm")
    write_build(BUILD)
    for _ in range(3):
        assert cli("promote").code == 0


def sweep(out: io.StringIO, *args: str, live: bool | None = None) -> int:
    return run_resume(["resume", "--check", *args], build=None, env={}, out=out, err=out,
                      live=live)  # fmt: skip


def test_terminal_detection_can_be_forced_either_way() -> None:
    assert on_terminal(Terminal()) and not on_terminal(io.StringIO())
    assert on_terminal(io.StringIO(), force=True) and not on_terminal(Terminal(), force=False)
    assert ConsoleReporter(out=Terminal()).live_progress
    assert not ConsoleReporter(out=io.StringIO()).live_progress
    assert not ConsoleReporter(out=Terminal(), live=False).live_progress


def test_a_sweep_on_a_terminal_shows_runs_checked_of_total(three_waiting: None) -> None:
    screen = Terminal()
    assert sweep(screen, live=True) == 0
    shown = ANSI.sub("", screen.getvalue())
    assert re.search(r"Sweeping.*\b[0-3]/3 runs checked", shown), shown
    report = shown[shown.index("still-waiting") - 60 :]
    assert "Checked 3 suspended run(s): 0 resumed, 3 still waiting" in report


def test_the_live_line_steps_aside_while_a_resumed_run_prints(
    three_waiting: None, tmp_path: Path
) -> None:
    (tmp_path / "GO").touch()
    screen = Terminal()
    assert sweep(screen, live=True) == 0
    shown = ANSI.sub("", screen.getvalue())
    assert shown.count("══ promote ══") == 3 and shown.count("✔ promote succeeded") == 3
    assert "Checked 3 suspended run(s): 3 resumed" in shown


def test_piped_a_sweep_prints_only_its_report(three_waiting: None) -> None:
    piped = io.StringIO()
    assert sweep(piped) == 0
    lines = piped.getvalue().splitlines()
    assert len(lines) == 4 and all("still-waiting → suspended" in line for line in lines[:3])
    assert lines[3].startswith("Checked 3 suspended run(s)")
    assert "Sweeping" not in piped.getvalue() and "\x1b" not in piped.getvalue()


def test_with_json_a_sweep_on_a_terminal_prints_only_json(three_waiting: None) -> None:
    out = Terminal()
    assert run_resume(["resume", "--check", "--json"], build=None, env={}, out=out,
                      err=io.StringIO(), live=True) == 0  # fmt: skip
    assert json.loads(out.getvalue())["counts"]["still_waiting"] == 3


def drawn(progress: SweepProgress) -> bool:
    return progress.active


def test_a_run_starting_pauses_the_live_line_and_the_next_run_brings_it_back() -> None:
    screen = Terminal()
    progress = SweepProgress(screen)
    progress.update(0, 3)
    assert drawn(progress)
    asyncio.run(PauseOnRun(progress).run_started("r1", None))  # type: ignore[arg-type]
    assert not drawn(progress)
    progress.update(1, 3)
    assert drawn(progress)
    progress.update(3, 3)  # the end: gone before the report prints
    assert not drawn(progress)
