"""A proxy in front of the fake GitHub that lets GitHub act on one chosen request but loses
its answer: the client never hears it (a process killed mid-call, a dropped connection)."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from fixtures.fake_github import FakeGitHub


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


class _LosingHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: LosingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        conn = http.client.HTTPConnection("127.0.0.1", self.server.upstream.port, timeout=30)
        skip = {"host", "connection", "content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        server = self.server
        if not server.landed.is_set() and server.holds(self.command, self.path, body):
            server.landed.set()  # GitHub acted on it; its answer never reaches the client
            server.release.wait(60)
            self.close_connection = True
            return
        self.send_response_only(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in ("content-length", "connection", "transfer-encoding"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PATCH = do_GET
