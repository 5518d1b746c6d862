"""A proxy in front of ``zuke serve`` that lets the service act on one chosen request and
loses its answer — after ``meanwhile`` ran: a second writer between the loss and the look."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import ThreadingHTTPServer

from tests.forwarding import ForwardingHandler

Holds = Callable[[str, str, bytes], bool]


class LosingHttpProxy(ThreadingHTTPServer):
    """Forwards to ``upstream_port``; the first request ``holds`` picks reaches the service
    (which acts on it), then ``meanwhile()`` runs, then the connection is closed unanswered."""

    daemon_threads = True

    def __init__(self, upstream_port: int) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.upstream_port = upstream_port
        self.holds: Holds | None = None
        self.meanwhile: Callable[[], object] = lambda: None
        self.lost = threading.Event()
        self.requests: list[tuple[str, str]] = []
        threading.Thread(target=self.serve_forever, args=(0.02,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def arm(self, holds: Holds, meanwhile: Callable[[], object] = lambda: None) -> None:
        self.holds, self.meanwhile = holds, meanwhile
        self.lost.clear()

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(ForwardingHandler):
    server: LosingHttpProxy

    def arrived(self) -> None:
        self.server.requests.append((self.command, self.path))

    def upstream_port(self) -> int:
        return self.server.upstream_port

    def lose(self, command: str, path: str, body: bytes) -> bool:
        server = self.server
        holds = server.holds
        if holds is None or not holds(command, path, body):
            return False
        server.holds = None
        server.meanwhile()  # the second writer, before the client can look
        server.lost.set()
        return True
