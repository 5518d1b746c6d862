"""A proxy in front of ``zuke serve`` that lets the service act on one chosen request and
loses its answer — after ``meanwhile`` ran: a second writer between the loss and the look."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LosingHttpProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        server = self.server
        server.requests.append((self.command, self.path))
        conn = http.client.HTTPConnection("127.0.0.1", server.upstream_port, timeout=30)
        skip = {"host", "connection", "content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        holds = server.holds
        if holds is not None and holds(self.command, self.path, body):
            server.holds = None
            server.meanwhile()  # the second writer, before the client can look
            server.lost.set()
            self.close_connection = True  # the answer never reaches the client
            return
        self.send_response_only(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET
