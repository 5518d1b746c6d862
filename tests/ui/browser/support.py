"""A real ``zuke serve`` process, the demo release run against it, and Debian's Chromium.

:func:`serve_process` starts ``python -m zuke._serve`` (SQLite in the test's
directory, or a Postgres URL) with a write and a read-only token and waits —
with a deadline — for its listening line; :func:`demo_release` copies
``docs/demo/build.py`` and runs ``zuke release --service api`` against it, so
the page shows a real run suspended at its QA gate, holding its staging lock.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.e2e.support import clean_env, finish, spawn
from tests.ui.support import READ_TOKEN, TOKEN
from zuke.testing.serve import listening_url

DEMO = Path(__file__).resolve().parents[3] / "docs" / "demo"
#: Debian's Chromium, headless, as root, and quiet: no host this machine cannot reach
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_DEADLINE_S = 30.0
#: set to 1 where a missing Chromium must fail the browser tests instead of skipping them
REQUIRE_ENV = "ZUKE_REQUIRE_BROWSER"
#: who starts the runs (``ZUKE_ACTOR``)
STARTER = "release-bot"


@dataclass
class Serve:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def client_env(self) -> dict[str, str]:
        return {"ZUKE_STATE_URL": self.url, "ZUKE_STATE_TOKEN": TOKEN, "ZUKE_ACTOR": STARTER}


@contextmanager
def serve_process(
    workdir: Path, *, db: str | None = None, args: tuple[str, ...] = ()
) -> Iterator[Serve]:
    """``zuke serve`` with both tokens; stopped with SIGTERM, which must exit 0."""
    log = workdir / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    env.update(ZUKE_SERVE_TOKEN=TOKEN, ZUKE_SERVE_READ_TOKEN=READ_TOKEN)
    argv = [
        sys.executable,
        "-m",
        "zuke._serve",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--db",
        db or str(workdir / "state.db"),
        *args,
    ]
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            bufsize=0,
        )
    try:
        yield Serve(url=listening_url(proc, deadline_s=START_DEADLINE_S), proc=proc, log=log)
    finally:
        proc.terminate()
        try:
            code = proc.wait(timeout=START_DEADLINE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError(f"zuke serve ignored SIGTERM\n{log.read_text()}") from None
        if proc.stdout is not None:
            proc.stdout.close()
    assert code == 0, f"zuke serve exited with {code}\n{log.read_text()}"
    assert "Traceback" not in log.read_text(), log.read_text()


def zuke(args: list[str], cwd: Path, env: Mapping[str, str]) -> str:
    """Run ``zuke args`` to the end; its output (exit 0 required)."""
    code, out = finish(spawn(args, cwd, dict(env)))
    assert code == 0, out
    return out


def demo_release(workdir: Path, serve: Serve, *, service: str = "api") -> str:
    """Run the demo release against ``serve`` until it suspends at QA; the run's id."""
    workdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(DEMO / "build.py", workdir / "build.py")
    out = zuke(["release", "--service", service], workdir, serve.client_env())
    assert "qa_approval waits for signal:qa-approved" in out, out
    listed = zuke(["runs", "list", "--status", "suspended", "--json"], workdir, serve.client_env())
    return str(json.loads(listed)[0]["id"])


def chromium_path() -> str | None:
    return shutil.which("chromium")


def require_chromium() -> str:
    """Debian's Chromium's path; without it the test skips, saying so — or fails where
    ``ZUKE_REQUIRE_BROWSER=1`` (CI, ``.ci/run``)."""
    path = chromium_path()
    if path is None:
        message = "the browser tests need Debian's Chromium: apt-get install -y chromium"
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{message} ({REQUIRE_ENV}=1)", pytrace=False)
        pytest.skip(message)
    return path


__all__ = [
    "CHROMIUM_ARGS",
    "REQUIRE_ENV",
    "Serve",
    "chromium_path",
    "clean_env",
    "demo_release",
    "require_chromium",
    "serve_process",
    "zuke",
]
