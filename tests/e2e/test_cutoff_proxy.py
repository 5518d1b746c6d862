"""A holder cut off from ``zuke serve`` stops before another process can get its key.

Real processes: ``zuke serve``, a holder whose only way to the server is a TCP
proxy in this test, and a second process that goes to the server directly.
The holder runs a synchronous body that never looks at ``ctx.cancelled``;
when the proxy is killed its renewals fail (nothing refuses them), and it must
end itself — one ``zuke:`` line, exit 3 — before the store's expiry lets the
second process in. Both append to one file with ``O_APPEND``, so the file's
order is the order of the writes: no tick of the first holder may follow the
second holder's start.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path

import pytest

from tests.e2e.support import finish, kill, spawn, wait_until, write_build
from tests.serve.support import TOKEN, running_server

pytestmark = pytest.mark.e2e

CUT_BUILD = """
    import os, pathlib, time
    from zuke import Build, target

    LOG = pathlib.Path(__file__).parent / "ticks.log"

    def note(line):
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\\n").encode())
        finally:
            os.close(fd)

    class Cut(Build):
        @target
        def hold(self, t):
            return t.lock(lambda s: s.key("cut-key").with_ttl("3s")).executes(self._hold)

        def _hold(self):  # ignores ctx.cancelled, as most real work does
            deadline = time.monotonic() + 60
            n = 0
            while time.monotonic() < deadline:
                n += 1
                note(f"holderA tick {n}")
                time.sleep(0.02)

        @target
        def take(self, t):
            return t.lock(lambda s: s.key("cut-key").with_ttl("3s")).executes(
                lambda: note("holderB start")
            )
"""


class Proxy:
    """A loopback TCP proxy to ``port``; :meth:`kill` drops every connection and the listener."""

    def __init__(self, port: int) -> None:
        self.port_to = port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.mutex = threading.Lock()
        self.killed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # killed
            upstream = socket.create_connection(("127.0.0.1", self.port_to))
            with self.mutex:
                if self.killed:
                    client.close()
                    upstream.close()
                    return
                self.sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def kill(self) -> None:
        with self.mutex:
            self.killed = True
            doomed = [self.listener, *self.sockets]
        for sock in doomed:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked accept() or recv()
            sock.close()


def test_a_holder_cut_off_from_the_server_ends_before_another_process_gets_its_key(
    tmp_path: Path,
) -> None:
    write_build(tmp_path, CUT_BUILD)
    log = tmp_path / "ticks.log"
    with running_server(tmp_path) as server:
        proxy = Proxy(server.port)
        via_proxy = {"ZUKE_STATE_URL": f"http://127.0.0.1:{proxy.port}", "ZUKE_STATE_TOKEN": TOKEN}
        direct = {"ZUKE_STATE_URL": server.url, "ZUKE_STATE_TOKEN": TOKEN}
        holder = spawn(["hold"], tmp_path, via_proxy)
        try:
            wait_until(lambda: log.exists() and "holderA tick 5" in log.read_text(),
                       "the holder's body to run")  # fmt: skip
            code, out = finish(spawn(["take"], tmp_path, direct))
            assert code == 1 and 'Lock "cut-key" is held by' in out, out  # held while in touch
            proxy.kill()

            def second_holder_got_it() -> bool:
                code, out = finish(spawn(["take"], tmp_path, direct))
                assert code == 0 or 'Lock "cut-key" is held by' in out, out
                return code == 0

            wait_until(second_holder_got_it, "the second process to take the key", timeout=20)
            code, out = finish(holder, timeout=10)
        finally:
            kill(holder)
            proxy.kill()
    lines = log.read_text().splitlines()
    start = lines.index("holderB start")
    assert any(line.startswith("holderA tick") for line in lines[:start])
    late = [line for line in lines[start:] if line.startswith("holderA")]
    assert late == [], f"the first holder ran on beside the second: {late[:3]}"
    assert code == 3, out
    ended = [line for line in out.splitlines() if line.startswith("zuke: ")]
    assert len(ended) == 1, out
    assert ended[0].startswith('zuke: lock "cut-key" could not be renewed'), out
    assert "a synchronous body it guards cannot be stopped" in ended[0]
    assert "ends now (exit 3)" in ended[0]
