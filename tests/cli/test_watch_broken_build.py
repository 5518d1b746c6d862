"""``zuke resume --check --watch`` outlives a bad merge (issue 19 §3).

While ``build.py`` cannot be used — a syntax error, a failing import, a
definition that raises — each sweep moves nothing and reports the runs not
checked, with the reason; the watcher goes on, reads the file again before
each later sweep, and sweeps as usual once it is fixed. The loop runs on a
:class:`ManualClock` and a waiter that moves it (no sleeps); each wait is
where the test edits the file.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import py_compile
import re
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CliRunner
from tests.runs.support import FakeWaiter
from zuke._clock import ManualClock
from zuke._errors import BuildDefinitionError
from zuke._loader import load_build_class
from zuke.state.filesystem import FileSystemStateStore

GOOD = """\
import os
from zuke import Build, resume_when, target

class Release(Build):
    @target
    def approve(self, t):
        return t.waits_for(lambda s: s.on(resume_when(
            lambda: os.environ.get("WATCH_TEST_APPROVED") == "1")))

    @target
    def promote(self, t):
        return t.depends_on(self.approve).executes(lambda: print("PROMOTED"))
"""

SYNTAX_ERROR = GOOD.replace("def promote(self, t):", "def promote(self, t)")

RAISING = GOOD.replace(
    "def promote(self, t):", 'def promote(self, t):\n        raise RuntimeError("bad merge")'
)

REASON = (
    "loading build.py failed (line 11): SyntaxError: expected ':'; "
    "'zuke resume --check --watch' needs it to check the run's gates"
)
RETRY = "; nothing was moved; the build is read again at the next sweep, in 5m00s"


#: the time each of the watcher's text lines carries (ISO 8601, UTC, to the second)
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ")


def unstamped(text: str) -> list[str]:
    """``text``'s lines without the watcher's time (a report line, or after ``zuke: ``),
    which every such line must carry; other lines (a resumed run's) as they are."""
    lines = []
    for line in text.splitlines():
        head = "zuke: " if line.startswith("zuke: ") else ""
        rest = line[len(head) :]
        found = STAMP.match(rest)
        lines.append(head + rest[found.end() :] if found else line)
    return lines


def drive(monkeypatch: pytest.MonkeyPatch, on_wait: Callable[[int], None]) -> None:
    """The next watcher runs its loop on a manual clock; ``on_wait(n)`` after sweep n."""
    import zuke.cli.watch_cmd as watch_cmd

    clock = ManualClock()
    monkeypatch.setattr(watch_cmd, "run_watch", functools.partial(
        watch_cmd.run_watch, clock=clock, waiter=FakeWaiter(clock, on_wait)))  # fmt: skip


def stop_at(n: int, then: dict[int, Callable[[], object]]) -> Callable[[int], None]:
    """``on_wait``: run ``then[k]`` at wait k; at wait ``n`` stop the watcher (SIGTERM)."""

    def on_wait(k: int) -> None:
        then.get(k, lambda: None)()
        if k == n:
            os.kill(os.getpid(), signal.SIGTERM)  # the watcher's handler: stop after this wait

    return on_wait


def suspended_run(cli: CliRunner, tmp_path: Path) -> tuple[str, FileSystemStateStore]:
    (tmp_path / "build.py").write_text(GOOD)
    started = cli("promote")
    found = re.search(r"Run (\S+) is suspended", started.out)
    assert found, started.text
    return found.group(1), FileSystemStateStore(tmp_path / ".zuke" / "runs")


def test_a_broken_build_is_reported_each_sweep_and_swept_as_usual_once_fixed(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, store = suspended_run(cli, tmp_path)
    (tmp_path / "build.py").write_text(SYNTAX_ERROR)
    before = store.get_run(run_id)
    seen: list[object] = []

    def fix() -> None:
        seen.append(store.get_run(run_id))  # two broken sweeps moved nothing
        (tmp_path / "build.py").write_text(GOOD)

    drive(monkeypatch, stop_at(3, {2: fix}))
    monkeypatch.setenv("WATCH_TEST_APPROVED", "1")  # the gate passes once it is asked
    result = cli("resume", "--check", "--watch")
    assert result.code == 0, result.text
    assert seen == [before]
    out = unstamped(result.out)
    assert all(STAMP.match(line) for line in result.out.splitlines() if "not-checked" in line)
    unchecked = f"{run_id} Release: not-checked → suspended — {REASON}"
    assert out.count(unchecked) == 2, result.out
    assert f"{run_id} Release [approve]: resumed → succeeded" in out
    assert "PROMOTED" in out
    assert out.index("PROMOTED") > max(i for i, line in enumerate(out) if line == unchecked)
    assert all(STAMP.match(line[6:]) for line in result.err.splitlines()[:2])
    assert unstamped(result.err) == [
        f"zuke: {REASON}{RETRY}",
        f"zuke: {REASON}{RETRY}",
        "zuke: SIGTERM: the watcher stopped after 3 sweep(s)",
    ]
    after = store.get_run(run_id)
    assert after is not None and after.record.status == "succeeded"


def test_with_json_each_broken_sweep_is_a_line_that_is_not_ok_and_says_why(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = suspended_run(cli, tmp_path)
    (tmp_path / "build.py").write_text(SYNTAX_ERROR)
    drive(monkeypatch, stop_at(2, {1: lambda: (tmp_path / "build.py").write_text(GOOD)}))
    result = cli("resume", "--check", "--watch", "--json")
    assert result.code == 0, result.text
    broken, fixed = (json.loads(line) for line in result.out.splitlines())
    assert broken["ok"] is False and broken["error"] == REASON
    assert [(r["id"], r["action"], r["result"]) for r in broken["runs"]] == [
        (run_id, "not-checked", "suspended")
    ]
    assert broken["counts"]["not_checked"] == 1
    assert fixed["ok"] is True and "error" not in fixed
    assert fixed["counts"]["still_waiting"] == 1 and fixed["counts"]["not_checked"] == 0


def test_definitions_that_raise_are_not_checked_and_the_file_is_read_again(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, store = suspended_run(cli, tmp_path)
    (tmp_path / "build.py").write_text(RAISING)  # it imports; defining the targets raises
    drive(monkeypatch, stop_at(2, {1: lambda: (tmp_path / "build.py").write_text(GOOD)}))
    monkeypatch.setenv("WATCH_TEST_APPROVED", "1")
    result = cli("resume", "--check", "--watch")
    assert result.code == 0, result.text
    first = unstamped(result.err)[0]
    assert first.startswith("zuke: defining the targets of Release failed: bad merge; ")
    assert first.endswith(RETRY)
    assert f"{run_id} Release: not-checked → suspended" in result.out
    assert f"{run_id} Release [approve]: resumed → succeeded" in result.out
    found = store.get_run(run_id)
    assert found is not None and found.record.status == "succeeded"


def test_a_build_that_loaded_is_kept_when_the_file_breaks_later(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id, _ = suspended_run(cli, tmp_path)
    drive(monkeypatch, stop_at(2, {1: lambda: (tmp_path / "build.py").write_text(SYNTAX_ERROR)}))
    result = cli("resume", "--check", "--watch")
    assert result.code == 0, result.text
    waiting = f"{run_id} Release [approve]: still-waiting → suspended"
    assert result.out.count(waiting) == 2, result.out  # until it restarts
    assert "not-checked" not in result.out
    assert result.err.splitlines() == ["zuke: SIGTERM: the watcher stopped after 2 sweep(s)"]


def test_a_broken_build_still_refuses_a_bad_command_line_at_once(
    cli: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "build.py").write_text(SYNTAX_ERROR)
    for argv, message in (
        (["--check", "--watch", "r-1"], "--watch sweeps every suspended run"),
        (["--check", "--watch", "--every", "5x"], "--every: '5x' is not a duration"),
        (["--check", "--watch", "--signal", "qa"], "--check sweeps"),
    ):
        result = cli("resume", *argv)
        assert result.code == 2 and result.out == "", result.text
        [line] = result.err.splitlines()
        assert line.startswith("zuke: ") and message in line, line


def test_a_fix_of_the_same_size_within_the_same_second_is_loaded(tmp_path: Path) -> None:
    """Cached bytecode is trusted by the source's mtime (whole seconds) and size: the
    watcher's reload (``fresh``) must read the source itself."""
    broken = "import no_such_module_zz\nfrom zuke import Build\n\nclass App(Build):\n    pass\n"
    fixed = broken.replace("import no_such_module_zz", "import os as no_such_mod")
    assert len(fixed) == len(broken)
    path = tmp_path / "build.py"
    path.write_text(broken)
    py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)),
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)  # fmt: skip
    stat = path.stat()
    with pytest.raises(BuildDefinitionError, match="no_such_module_zz"):
        load_build_class(path)
    path.write_text(fixed)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the same second, the same size
    assert load_build_class(path, fresh=True).__name__ == "App"


def test_the_watcher_reloads_the_file_fresh(
    cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same, through the watcher: a failing import fixed within the second."""
    run_id, _ = suspended_run(cli, tmp_path)
    path = tmp_path / "build.py"
    broken = GOOD.replace("import os\n", "import no_such_module_zz\nimport os\n")
    fixed = GOOD.replace("import os\n", "import os as no_such_mod\nimport os\n")
    assert len(fixed) == len(broken)
    path.write_text(broken)
    py_compile.compile(str(path), cfile=importlib.util.cache_from_source(str(path)),
                       invalidation_mode=py_compile.PycInvalidationMode.TIMESTAMP)  # fmt: skip
    stat = path.stat()

    def fix() -> None:
        path.write_text(fixed)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    drive(monkeypatch, stop_at(2, {1: fix}))
    result = cli("resume", "--check", "--watch")
    assert result.code == 0, result.text
    assert f"{run_id} Release: not-checked → suspended" in result.out
    assert f"{run_id} Release [approve]: still-waiting → suspended" in result.out


def test_a_build_that_loads_late_and_names_its_own_store_moves_the_sweeps_there() -> None:
    """Until the build loads, its ``state_store()`` is unknown: the environment's store is
    reported; once it loads, the sweeps (and the watcher's wakes) move to the build's."""
    from zuke import Build, target
    from zuke._engine.run import RunOptions
    from zuke.cli.watch_cmd import BuildSweeps, Ready
    from zuke.runs.continuation import ResumeOptions
    from zuke.runs.watch import NotChecked
    from zuke.state.memory import MemoryStateStore
    from zuke.state.records import GraphNode, RunRecord, TargetRecord

    environments, builds = MemoryStateStore(), MemoryStateStore()
    at = "2026-01-01T00:00:00.000Z"
    environments.create_run(RunRecord(
        id="r1", build="Own", root_target="hello", status="suspended", actor="ci",
        created_at=at, updated_at=at, graph=(GraphNode("hello"),),
        targets={"hello": TargetRecord(status="waiting")}))  # fmt: skip

    class Own(Build):
        @target
        def hello(self, t):
            return t.executes(lambda: None)

        def state_store(self) -> MemoryStateStore:
            return builds

    attempts = iter([BuildDefinitionError("loading build.py failed (line 1): SyntaxError: x")])

    def load() -> type[Build]:
        problem = next(attempts, None)
        if problem is not None:
            raise problem
        return Own

    def prepare(build: type[Build]) -> Ready:
        return Ready(build, ResumeOptions(), RunOptions(env={}))

    sweeps = BuildSweeps(environments, None, load=load, prepare=prepare)
    moved: list[object] = []
    sweeps.moved = moved.append
    try:
        with pytest.raises(NotChecked) as broken:
            sweeps(lambda: False)
        assert [(e.run_id, e.action) for e in broken.value.report.entries] == [
            ("r1", "not-checked")
        ]
        report = sweeps(lambda: False)
    finally:
        sweeps.close()  # its loop, which a watcher closes when it stops
    assert report.entries == [] and sweeps.store is builds and moved == [builds]
    found = environments.get_run("r1")
    assert found is not None and found.record.status == "suspended"


def test_on_a_terminal_the_status_says_the_last_sweep_could_not_use_the_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import io

    from zuke.cli.sweep_output import sweep_text
    from zuke.cli.watch_cmd import LiveStatus
    from zuke.runs.sweep_report import SweepEntry, SweepReport

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setenv("COLUMNS", "200")
    out, err = Terminal(), io.StringIO()
    live = LiveStatus(out, err, str, sweep_text, wakes=False)
    at = 1_700_000_000_000
    report = SweepReport([SweepEntry("r-1", "Release", "not-checked", "suspended", detail="x")])
    live.unchecked(report, REASON, at, at + 300_000)
    live.idle(at + 300_000)
    live.close()
    assert "r-1 Release: not-checked → suspended — x" in out.getvalue()
    assert "the build cannot be used, 1 run(s) not checked" in out.getvalue()
    assert err.getvalue() == f"zuke: 2023-11-14T22:13:20Z {REASON}{RETRY}\n"
