"""Helpers for the suspend/resume, reaping and sweep tests that use real ``zuke`` processes.

Every wait here is a poll with a deadline: a run's lease lapsing, the wall
clock passing a gate's recorded deadline, a marker file appearing.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

from tests.e2e.support import finish, spawn, wait_until
from zuke._clock import parse_iso
from zuke.state._protocol import LockAcquired, LockHolder, StateStore
from zuke.state.filesystem import FileSystemStateStore
from zuke.state.records import RunRecord

OBSERVER = LockHolder(actor="test", run_id="observer", since="2026-01-01T00:00:00.000Z")
SUSPENDED_LINE = re.compile(r"Run (\S+) is suspended")
#: What every losing resumer prints (the three forms of AlreadyResumedError).
ALREADY_RESUMED = re.compile(
    r"^zuke: resume: run \S+ (is running \(resumed or started by|is being resumed by|"
    r"was resumed by) .*; nothing to do$",
    re.MULTILINE,
)
#: A signal gate with a marker-writing dependent; shared by several tests.
MARKER_WRITER = """
    def append_line(path, text):
        import os
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (text + "\\n").encode())
        finally:
            os.close(fd)

    def wait_for(path, what):
        import time
        deadline = time.monotonic() + 60
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the test never wrote {what}")
            time.sleep(0.01)
"""


def fs_store(workdir: Path) -> FileSystemStateStore:
    """The store a build in ``workdir`` uses by default."""
    return FileSystemStateStore(workdir / ".zuke" / "runs")


def record_of(store: StateStore, run_id: str) -> RunRecord:
    found = store.get_run(run_id)
    assert found is not None, f"run {run_id} is not in the store"
    return found.record


def version_of(store: StateStore, run_id: str) -> str:
    found = store.get_run(run_id)
    assert found is not None, f"run {run_id} is not in the store"
    return found.version


def suspend(workdir: Path, args: list[str], env: dict[str, str] | None = None) -> str:
    """Run ``zuke args`` to its suspension (exit 0); the run id it printed."""
    code, out = finish(spawn(args, workdir, env))
    assert code == 0, out
    match = SUSPENDED_LINE.search(out)
    assert match, f"the run did not suspend:\n{out}"
    return match.group(1)


def sweep(
    workdir: Path, env: dict[str, str] | None = None, *extra: str
) -> tuple[int, dict[str, Any]]:
    """``zuke resume --check --json [extra]``: its exit code and its summary."""
    code, out = finish(spawn(["resume", "--check", *extra, "--json"], workdir, env))
    start = out.find("{\n")
    assert start >= 0, f"no JSON summary (exit {code}):\n{out}"
    summary, _ = json.JSONDecoder().raw_decode(out, start)  # a zuke: line may follow it
    return code, summary


def actions(summary: dict[str, Any], run_id: str) -> list[str]:
    """What a sweep did with one run, in order."""
    return [entry["action"] for entry in summary["runs"] if entry["id"] == run_id]


def wait_for_lease_to_lapse(store: StateStore, run_id: str) -> None:
    """Poll until the run's lease can be taken (its holder is gone), then give it back."""

    def free() -> bool:
        taken = store.acquire_lock(f"zuke-run-{run_id}", OBSERVER, 60_000)
        if isinstance(taken, LockAcquired):
            store.release_lock(f"zuke-run-{run_id}", taken.token)
            return True
        return False

    wait_until(free, f"run {run_id}'s lease to lapse")


def wait_past(stamp: str | None, what: str) -> None:
    """Poll the wall clock until it is past an ISO ``stamp`` (a recorded deadline)."""
    assert stamp is not None, f"{what}: no stamp recorded"
    moment = parse_iso(stamp)
    assert moment is not None, f"{what}: {stamp!r} is no time"
    wait_until(lambda: time.time() * 1000 > moment + 5, what)


def gate_deadline(record: RunRecord, gate: str) -> str | None:
    waiting = record.targets[gate].waiting_for
    assert waiting is not None, f"gate {gate} is not waiting: {record.targets[gate]}"
    return waiting.deadline


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []
