"""``zuke resume --check --watch`` as a real process outlives a bad merge (issue 19 §3).

Started while ``build.py`` has a syntax error, it keeps running and reports the
run not checked; once the file is fixed it resumes the run without a restart,
and SIGTERM still stops it with one line. Every wait is a poll with a deadline.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.e2e.resume_support import fs_store, record_of, suspend
from tests.e2e.support import finish, kill, output_of, spawn, wait_until, write_build

pytestmark = pytest.mark.e2e

GOOD = """
    import os
    from zuke import Build, resume_when, target

    class Release(Build):
        @target
        def approve(self, t):
            return t.waits_for(lambda s: s.on(resume_when(
                lambda: os.environ.get("WATCHER") == "1")))

        @target
        def promote(self, t):
            return t.depends_on(self.approve).executes(lambda: print("PROMOTED"))
"""


def test_a_watcher_started_on_a_broken_build_resumes_the_run_once_the_file_is_fixed(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, GOOD)
    run_id = suspend(tmp_path, ["promote"])
    write_build(tmp_path, GOOD.replace("def promote(self, t):", "def promote(self, t)"))
    out = tmp_path / "watch.out"
    watcher = spawn(["resume", "--check", "--watch", "--every", "1s"], tmp_path,
                    {"WATCHER": "1"}, output=out)  # fmt: skip
    try:
        unchecked = f"{run_id} Release: not-checked → suspended"
        wait_until(lambda: output_of(out).count(unchecked) >= 2, "two not-checked sweeps")
        assert watcher.poll() is None, output_of(out)  # a bad merge does not stop it
        assert record_of(fs_store(tmp_path), run_id).status == "suspended"
        write_build(tmp_path, GOOD)  # the fix (a git pull)
        resumed = f"{run_id} Release [approve]: resumed → succeeded"
        wait_until(lambda: resumed in output_of(out), "the sweep after the fix")
        watcher.send_signal(signal.SIGTERM)
        code, _ = finish(watcher)
    finally:
        kill(watcher)
    text = output_of(out)
    assert code == 0, text
    assert "SyntaxError: expected ':'; 'zuke resume --check --watch' needs it" in text
    assert re.fullmatch(r"zuke: SIGTERM: the watcher stopped after \d+ sweep\(s\)",
                        text.strip().splitlines()[-1])  # fmt: skip
    assert text.count("PROMOTED") == 1
    assert record_of(fs_store(tmp_path), run_id).status == "succeeded"
