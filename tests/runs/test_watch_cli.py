"""``zuke resume --check --watch [--every]`` on the command line: usage, output, a signal stops it.

The build's gate sends SIGTERM to this very process when it is asked, so the
stop lands while the sweep is inside the run's gate check (no sleeps).
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import BuildWriter, CliRunner

BUILD = """
    import os
    import signal
    from zuke import Build, resume_when, target

    def approved():
        if os.environ.get("WATCH_TEST_STOP") == "1":
            os.kill(os.getpid(), signal.SIGTERM)  # SIGTERM inside the gate check
        return os.environ.get("WATCH_TEST_APPROVED") == "1"

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(resume_when(approved)))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: print("PROMOTED"))
"""


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--check", "--every", "5m"], "--every goes with --watch"),
        (["--watch"], "zuke resume needs a RUN_ID"),
        (["--check", "--watch", "r-1"], "--watch sweeps every suspended run"),
        (["--check", "--watch", "--every", "5x"], "--every: '5x' is not a duration"),
        (["--check", "--watch", "--every", "0"], "--every: '0' must be more than zero"),
        (["--check", "--watch=yes"], "--watch takes no value"),
    ],
)
def test_watch_usage_errors_are_one_line(
    cli: CliRunner, write_build: BuildWriter, argv: list[str], message: str
) -> None:
    write_build(BUILD)
    result = cli("resume", *argv)
    assert result.code == 2, result.text
    assert result.out == ""
    [line] = result.err.strip().splitlines()
    assert line.startswith("zuke: ") and message in line, line


def test_sigterm_in_a_gate_check_finishes_that_run_then_exits_0_with_one_line(
    cli: CliRunner, write_build: BuildWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_build(BUILD)
    started = cli("promote")
    run_id = re.search(r"Run (\S+) is suspended", started.out)
    assert run_id, started.text
    monkeypatch.setenv("WATCH_TEST_STOP", "1")
    monkeypatch.setenv("WATCH_TEST_APPROVED", "1")
    result = cli("resume", "--check", "--watch", "--every", "1h")
    assert result.code == 0, result.text
    assert "PROMOTED" in result.out  # the run in hand finished
    assert f"{run_id.group(1)} Release [approve]: resumed → succeeded" in result.out
    assert result.err.strip().splitlines()[-1] == (
        "zuke: SIGTERM: the watcher stopped after 1 sweep(s)"
    )
    again = cli("runs", "show", run_id.group(1))
    assert again.code == 0 and "succeeded" in again.out


def test_json_is_one_object_per_line_per_sweep(
    cli: CliRunner, write_build: BuildWriter, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_build(BUILD)
    assert cli("promote").code == 0
    monkeypatch.setenv("WATCH_TEST_STOP", "1")
    result = cli("resume", "--check", "--watch", "--json")
    assert result.code == 0, result.text
    [line] = result.out.strip().splitlines()
    sweep = json.loads(line)
    assert sweep["counts"]["still_waiting"] == 1 and sweep["ok"] is True
    assert set(sweep) >= {"runs", "counts", "ok", "at", "next"}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_status_between_sweeps_says_the_last_sweep_and_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one line, however rich would wrap it
    from zuke._clock import iso
    from zuke.cli.sweep_output import sweep_text
    from zuke.cli.watch_cmd import LiveStatus
    from zuke.runs.sweep_report import SweepEntry, SweepReport

    out, err = Terminal(), io.StringIO()
    live = LiveStatus(out, err, str, sweep_text, wakes=True)
    at = 1_700_000_000_000
    report = SweepReport([SweepEntry("r-1", "Release", "still-waiting", "suspended")])
    live.sweeping("start")
    live.swept(report, at, at + 300_000)
    live.idle(at + 300_000)
    live.sweeping("interval")  # the status goes while a sweep prints
    live.close()
    text = out.getvalue()
    assert "r-1 Release: still-waiting → suspended" in text  # the report, as today
    assert f"last sweep {iso(at)[11:19]}Z: 1 run(s) checked" in text
    assert f"next sweep {iso(at + 300_000)[11:19]}Z (sooner on a signal)" in text


def test_off_a_terminal_the_watcher_prints_plain_lines_and_never_imports_rich(
    tmp_path: Path,
) -> None:
    (tmp_path / "build.py").write_text(textwrap.dedent(BUILD))
    script = textwrap.dedent(
        """
        import io, os, sys
        from zuke.cli import main
        assert main(["promote"], env={}, out=io.StringIO()) == 0
        os.environ["WATCH_TEST_STOP"] = "1"  # the watcher's gate check sends SIGTERM
        out, err = io.StringIO(), io.StringIO()
        code = main(["resume", "--check", "--watch"], env={}, out=out, err=err)
        print(code, "rich" in sys.modules)
        print(out.getvalue())
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZUKE_", "WATCH_TEST"))}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    first, *rest = done.stdout.splitlines()
    assert first == "0 False", done.stdout + done.stderr
    assert any(
        re.match(r"\d{4}-\d\d-\d\dT[0-9:]{8}Z Checked 1 suspended run\(s\)", line) for line in rest
    )
    assert "\x1b[" not in done.stdout
