"""The e2e folder's own hygiene (issue 28 §7): a process a test spawned and left running is
killed and reaped when the test ends, so it neither holds a core nor fails a later test
with Python's "subprocess … is still running" ResourceWarning."""

from __future__ import annotations

import gc
import warnings
from pathlib import Path

from tests.e2e.support import (
    SPAWNED,
    alive,
    output_of,
    reap_spawned,
    spawn,
    wait_until,
    write_build,
)

BUILD = """
    import pathlib, time
    from zuke import Build, target

    class Forever(Build):
        @target
        def wait(self, t):
            def body():
                (pathlib.Path(__file__).parent / "started").write_text("yes")
                time.sleep(600)
            return t.executes(body)
"""


def test_a_process_left_running_is_killed_reaped_and_named(tmp_path: Path) -> None:
    write_build(tmp_path, BUILD)
    proc = spawn(["wait"], tmp_path, {"ZUKE_STATE": "off"})
    wait_until(lambda: output_of(tmp_path / "started") != "", "the body to start")
    assert [proc] == SPAWNED
    assert reap_spawned() == ["wait"]
    assert proc.returncode is not None and not alive(proc.pid)
    assert SPAWNED == []
    del proc
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gc.collect()  # a reaped Popen warns of nothing when collected
