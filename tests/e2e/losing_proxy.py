"""A proxy in front of the fake GitHub that lets GitHub act on one chosen request but loses
its answer: the client never hears it (a process killed mid-call, a dropped connection)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer

from fixtures.fake_github import FakeGitHub
from tests.forwarding import ForwardingHandler


class LosingProxy(ThreadingHTTPServer):
    """Forwards to the fake GitHub; the first request ``holds`` picks reaches GitHub (which
    acts on it) but its answer never comes back: ``landed`` is set and the connection hangs
    until ``release`` (the test kills the process meanwhile)."""

    daemon_threads = True

    def __init__(self, upstream: FakeGitHub, holds: Callable[[str, str, bytes], bool]) -> None:
        super().__init__(("127.0.0.1", 0), _LosingHandler)
        self.upstream = upstream
        self.holds = holds
        self.landed = threading.Event()
        self.release = threading.Event()
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _LosingHandler(ForwardingHandler):
    server: LosingProxy

    def upstream_port(self) -> int:
        return self.server.upstream.port

    def lose(self, command: str, path: str, body: bytes) -> bool:
        server = self.server
        if server.landed.is_set() or not server.holds(command, path, body):
            return False
        server.landed.set()  # GitHub acted on it; its answer never reaches the client
        server.release.wait(60)
        return True
