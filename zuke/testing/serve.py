"""Waiting for a ``zuke serve`` process to listen: its one line of stdout.

``zuke serve`` prints ``zuke serve listening on http://HOST:PORT`` once its
socket is bound (with ``--port 0`` that line is the only way to learn the
port). Tests and benchmarks that start a real server read it here.
"""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import time

from zuke._errors import ZukeError

LISTENING = re.compile(rb"^zuke serve listening on (http://\S+)\n")


class ServeStartError(ZukeError, RuntimeError):
    """The server exited, stayed silent past the deadline, or printed something else."""


def listening_url(proc: subprocess.Popen[bytes], *, deadline_s: float) -> str:
    """The base URL from ``proc``'s first stdout line (an unbuffered pipe), waiting at most
    ``deadline_s``; :class:`ServeStartError` if it does not come."""
    assert proc.stdout is not None, "start the server with stdout=subprocess.PIPE"
    line = b""
    deadline = time.monotonic() + deadline_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while not line.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise ServeStartError("zuke serve did not start in time")
            chunk = os.read(proc.stdout.fileno(), 1)
            if not chunk:
                raise ServeStartError(f"zuke serve exited with {proc.wait()} before listening")
            line += chunk
    match = LISTENING.match(line)
    if match is None:
        raise ServeStartError(f"zuke serve printed {line!r} instead of its listening line")
    return match.group(1).decode()
