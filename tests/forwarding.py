"""A loopback HTTP forwarder that can lose an answer: the base of the tests' losing proxies.

A lost answer is the case a retrying client must get right: the upstream acted on the
request, the client never hears so. Each proxy decides which request loses its answer
(and what happens meanwhile) in :meth:`ForwardingHandler.lose`; forwarding is written once.
"""

from __future__ import annotations

import http.client
from http.server import BaseHTTPRequestHandler
from typing import Any

_HOP = ("content-length", "connection", "transfer-encoding")


class ForwardingHandler(BaseHTTPRequestHandler):
    """Forwards every request to :meth:`upstream_port`, then answers, unless :meth:`lose`."""

    protocol_version = "HTTP/1.1"

    def upstream_port(self) -> int:
        raise NotImplementedError

    def arrived(self) -> None:
        """Called as each request arrives, before it is forwarded."""

    def lose(self, command: str, path: str, body: bytes) -> bool:
        """Called after the upstream acted on the request: ``True`` drops its answer."""
        return False

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.arrived()
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port(), timeout=30)
        skip = {"host", "connection", "content-length"}
        headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
        conn.request(self.command, self.path, body=body or None, headers=headers)
        answer = conn.getresponse()
        data = answer.read()
        conn.close()
        if self.lose(self.command, self.path, body):
            self.close_connection = True  # the answer never reaches the client
            return
        self.send_response_only(answer.status)
        for name, value in answer.getheaders():
            if name.lower() not in _HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_POST = do_PATCH = do_PUT = do_DELETE = do_GET
