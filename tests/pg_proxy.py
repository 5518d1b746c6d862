"""A TCP proxy before a test cluster that loses an answer or a request, or stalls (fault tests).

:class:`LosingProxy` forwards Postgres connections; once armed with a marker, it
loses the answer to the message carrying it (after the server finished, and in
autocommit committed, the statement) or the message itself; :meth:`LosingProxy.hold`
makes it take new connections and never answer them (a stalled server). Moved out of
``pg_support`` (which re-exports it) to keep each module to one thing.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Literal

#: ReadyForQuery: the server has finished (and, in autocommit, committed) the statement
READY = b"Z\x00\x00\x00\x05"
Mode = Literal["answer", "request"]


class _Pair:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client, self.server = client, server
        self.losing = False

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


class LosingProxy:
    """Forwards Postgres connections; once armed, loses one answer or one request."""

    def __init__(self, upstream_port: int) -> None:
        self._upstream = ("127.0.0.1", upstream_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._marker: bytes | None = None
        self._mode: Mode = "answer"
        self._pairs: list[_Pair] = []
        self._held: list[socket.socket] = []
        self._holding = False
        #: set once the armed loss happened
        self.tripped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self, marker: str, mode: Mode) -> None:
        with self._lock:
            self._marker, self._mode = marker.encode(), mode
            self.tripped.clear()

    @property
    def held(self) -> int:
        """How many connections :meth:`hold` took."""
        with self._lock:
            return len(self._held)

    def hold(self) -> None:
        """From now on take each new connection and never forward or answer it: a stalled
        server, a half-open path, a proxy whose upstream hangs (:meth:`close` ends them)."""
        with self._lock:
            self._holding = True

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            pairs, self._pairs = self._pairs, []
            held, self._held = self._held, []
        for pair in pairs:
            pair.close()
        for sock in held:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                if self._holding:
                    self._held.append(client)
                    continue
            pair = _Pair(client, socket.create_connection(self._upstream))
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._up, args=(pair,), daemon=True).start()
            threading.Thread(target=self._down, args=(pair,), daemon=True).start()

    def _up(self, pair: _Pair) -> None:
        while data := _recv(pair.client):
            with self._lock:
                hit = self._marker is not None and self._marker in data
                mode = self._mode
                if hit:
                    self._marker = None
            if hit and mode == "request":  # the server never sees it
                pair.close()
                self.tripped.set()
                return
            pair.losing = pair.losing or hit  # set before the server can answer
            try:
                pair.server.sendall(data)
            except OSError:
                break
        pair.close()

    def _down(self, pair: _Pair) -> None:
        answer = b""
        while data := _recv(pair.server):
            if pair.losing:
                answer += data
                if READY in answer:  # done and committed: the client never hears of it
                    pair.close()
                    self.tripped.set()
                    return
                continue
            try:
                pair.client.sendall(data)
            except OSError:
                break
        pair.close()
