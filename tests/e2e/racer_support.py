"""Racer processes for the serve race tests: spawned, released by one write to a pipe, quit."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tests.serve.support import TOKEN, child_env

DEADLINE_S = 30.0


class Lines:
    """Line reader over a child's stdout, with a deadline on every read."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.buffer = b""

    def read(self, deadline: float) -> str:
        with selectors.DefaultSelector() as selector:
            selector.register(self.fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                remaining = deadline - time.monotonic()
                assert remaining > 0 and selector.select(remaining), "a racer went quiet"
                chunk = os.read(self.fd, 4096)
                assert chunk, f"a racer exited with {self.proc.wait()}"
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()


@contextmanager
def racer_processes(
    script: str, urls: list[str], count: int
) -> Iterator[tuple[int, list[subprocess.Popen[bytes]]]]:
    """``count`` processes running ``script url go_fd index`` (racer ``i`` on ``urls[i % n]``);
    the pipe's write end (the barrier) and the processes. At the end each is told to quit,
    and all must exit 0."""
    go_read, go_write = os.pipe()
    env = {**child_env(None), "ZUKE_STATE_TOKEN": TOKEN}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, urls[i % len(urls)], str(go_read), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            pass_fds=(go_read,),
        )
        for i in range(count)
    ]
    os.close(go_read)
    try:
        yield go_write, procs
    finally:
        os.close(go_write)  # a racer still waiting for the barrier reads EOF and fails
        for proc in procs:
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(json.dumps({"quit": True}).encode() + b"\n")
                proc.stdin.close()
            except BrokenPipeError:
                pass
            proc.wait(timeout=DEADLINE_S)
            proc.stdout.close()
    assert [p.returncode for p in procs] == [0] * count


def race_round(
    procs: list[subprocess.Popen[bytes]], lines: list[Lines], go_write: int, order: dict[str, Any]
) -> list[dict[str, Any]]:
    """Send every racer ``order``, wait until all are armed, release them at once with one
    write to the pipe; their answers, in racer order."""
    deadline = time.monotonic() + DEADLINE_S
    line = json.dumps(order).encode() + b"\n"
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(line)
        proc.stdin.flush()
    assert [reader.read(deadline) for reader in lines] == ["armed"] * len(procs)
    os.write(go_write, b"x" * len(procs))  # release every racer at once
    return [json.loads(reader.read(deadline)) for reader in lines]
