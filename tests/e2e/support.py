"""Real ``zuke`` processes for end-to-end tests: spawn, wait with deadlines, read output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path

ZUKE = str(Path(sys.executable).parent / "zuke")
DEADLINE_S = 30.0
#: every process :func:`spawn` started in the current test; ``reap_spawned`` (the folder's
#: autouse fixture) ends and reaps those still running when the test ends
SPAWNED: list[subprocess.Popen[str]] = []


def write_build(directory: Path, source: str, name: str = "build.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return path


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The test's environment without zuke or GitHub settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZUKE_", "GITHUB_"))}
    env.update(extra or {})
    return env


def spawn(
    args: list[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    *,
    output: Path | None = None,
) -> subprocess.Popen[str]:
    """Start ``zuke args``; its output goes to a pipe, or to ``output`` to read it while it runs."""
    if output is None:
        proc = subprocess.Popen(
            [ZUKE, *args], cwd=cwd, env=clean_env(env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    else:
        with output.open("w") as sink:
            proc = subprocess.Popen(
                [ZUKE, *args], cwd=cwd, env=clean_env(env), stdin=subprocess.DEVNULL,
                stdout=sink, stderr=subprocess.STDOUT, text=True,
            )  # fmt: skip
    SPAWNED.append(proc)
    return proc


def reap_spawned() -> list[str]:
    """Kill and reap what :func:`spawn` started and is still running; its commands.

    A test that fails before it finishes its process must not leave it behind: left
    running it holds a core on a 2-core runner, and once its ``Popen`` is collected,
    during some later test on the same xdist worker, Python's "subprocess … is still
    running" ResourceWarning (an error here) fails that unrelated test — CI's first
    two-worker run met exactly this (issue 28 §7).
    """
    left: list[str] = []
    while SPAWNED:
        proc = SPAWNED.pop()
        if proc.poll() is None:
            argv = proc.args if isinstance(proc.args, list | tuple) else [proc.args]
            left.append(" ".join(str(a) for a in argv[1:]))
        kill(proc)
    return left


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE_S) -> None:
    """Poll ``condition`` until true; fail naming ``what`` past the deadline."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def finish(proc: subprocess.Popen[str], timeout: float = DEADLINE_S) -> tuple[int, str]:
    """Wait for a process; its exit code and combined output."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"process did not finish in {timeout}s:\n{out}") from None
    return proc.returncode, out


def output_of(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def kill(proc: subprocess.Popen[str]) -> str:
    """SIGKILL a process (if still running), reap it and close its pipe; its output."""
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=DEADLINE_S)
    return out


def alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0]
    except OSError:
        return False
