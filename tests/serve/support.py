"""Start ``zuke serve`` for tests: a real ``python -m zuke._serve`` process, or in process.

:func:`running_server` starts the service on a free port (``--port 0``),
waits — with a deadline, no sleeps — for its one ``listening on`` line,
yields a :class:`ServerProcess` with the base URL, and on exit stops it with
SIGTERM and asserts a clean exit (code 0). The child's stderr (one log line per
request) goes to a file, so a chatty server can never block on a full pipe.
:func:`in_process` runs a :class:`StateServer` on a thread instead, for tests
that need no process of their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from zuke._serve import StateServer
from zuke.testing.serve import ServeStartError, listening_url

TOKEN = f"test-serve-token-{uuid.uuid4().hex}"
START_DEADLINE_S = 20.0
STOP_DEADLINE_S = 20.0
#: how long a hung server gets to dump its threads' stacks before it is killed
DUMP_DEADLINE_S = 5.0


@dataclass
class ServerProcess:
    url: str
    proc: subprocess.Popen[bytes]
    stderr_path: Path
    more_stdout: bytes = b""

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def terminate(self) -> int:
        """SIGTERM, then the exit code (waits with a deadline); idempotent.

        Whatever the process printed after its listening line is kept in
        :attr:`more_stdout`.
        """
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_DEADLINE_S)
        except subprocess.TimeoutExpired:
            # started with -X faulthandler: SIGABRT writes every thread's stack to stderr, so
            # a hang says where it hung (seen once, stop 33: a SQLite-backed serve whose
            # requests had all been answered, in tests/e2e/test_lock_processes.py)
            self.proc.send_signal(signal.SIGABRT)
            try:
                self.proc.wait(timeout=DUMP_DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            raise AssertionError(
                f"zuke serve ignored SIGTERM for {STOP_DEADLINE_S}s; its threads then, as "
                f"faulthandler dumped them on SIGABRT:\n{self.stderr()}"
            ) from None
        finally:
            stdout = self.proc.stdout
            if stdout is not None and not stdout.closed:
                self.more_stdout += stdout.read() if self.proc.poll() is not None else b""
                stdout.close()
        return code


def serve_command(db: Path | str, *args: str) -> list[str]:
    return [sys.executable, "-m", "zuke._serve", "--host", "127.0.0.1", "--db", str(db), *args]


def child_env(token: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZUKE_")}
    if token is not None:
        env["ZUKE_SERVE_TOKEN"] = token
    return env


def start_server(
    workdir: Path,
    *,
    db: Path | str | None = None,
    token: str | None = TOKEN,
    args: Sequence[str] = (),
) -> ServerProcess:
    """Start the service and return once it has printed its listening line."""
    db = db or workdir / "state.db"
    stderr_path = workdir / f"serve-{uuid.uuid4().hex[:8]}.stderr"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", *serve_command(db, "--port", "0", *args)[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=child_env(token),
            bufsize=0,
        )
    try:
        url = listening_url(proc, deadline_s=START_DEADLINE_S)
    except ServeStartError as exc:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        raise AssertionError(f"{exc}\n{stderr_path.read_text()}") from None
    return ServerProcess(url=url, proc=proc, stderr_path=stderr_path)


@contextmanager
def running_server(
    workdir: Path,
    *,
    db: Path | str | None = None,
    token: str | None = TOKEN,
    args: Sequence[str] = (),
) -> Iterator[ServerProcess]:
    """A started service; stopped with SIGTERM afterwards, which must exit 0."""
    server = start_server(workdir, db=db, token=token, args=args)
    try:
        yield server
    finally:
        code = server.terminate()
    assert code == 0, f"zuke serve exited with {code}\n{server.stderr()}"
    rest = server.more_stdout
    assert rest == b"", f"zuke serve printed more than its listening line: {rest!r}"
    assert "Traceback" not in server.stderr(), server.stderr()


@contextmanager
def in_process(
    workdir: Path, *, db: str | Path | None = None, **kwargs: Any
) -> Iterator[tuple[StateServer, httpx.Client]]:
    """A :class:`StateServer` on a thread (``db``: default a SQLite file in ``workdir``)
    and a raw client that sends the token."""
    headers = {"Authorization": f"Bearer {TOKEN}", "x-zuke-state-protocol": "1"}
    with (
        StateServer(db_path=db or workdir / "state.db", token=TOKEN, **kwargs) as server,
        httpx.Client(base_url=server.url, headers=headers) as client,
    ):
        yield server, client
