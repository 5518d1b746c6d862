"""Live pages: server-sent events that carry a page's live region whenever it changes.

A page's script opens ``/ui/events?view=…`` (``EventSource``). Streams that
follow the same view share one :class:`Feed`: it renders the view's live
region on a worker thread, at once and then whenever the state may have
changed, and each stream sends the region (``event: update``) when its digest
differs from what that browser has (the page's own digest, then the
``Last-Event-ID`` the browser sends back on reconnecting).

*May have changed* is decided without memory of the state, so every replica
decides it alike:

* **every** :attr:`LiveSettings.poll_s` — the view is rendered again and
  compared (a render reads what the page reads, its own O(page) cost);
* **at once** on Postgres when ``NOTIFY zuke_runs`` says a run of the
  namespace parked or was signalled — the same ``LISTEN`` the watching
  sweeper wakes on (``PgServeDb.listen``); the poll still catches what no
  trigger announces (a run that goes on to succeed).

A stream ends when the browser leaves, when its session lapses (``event:
gone``), or when the server stops (promptly: a stop waits for no stream).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import re
import threading
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

from zuke._serve.asgi import LineLog
from zuke._serve.ui.http import SAFETY_HEADERS, Receive, Send

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class LiveSettings:
    poll_s: float = 1.0  #: how often a followed view is rendered again
    listen_poll_s: float = 2.0  #: the same, where NOTIFY wakes it (Postgres)
    heartbeat_s: float = 15.0  #: a comment this often keeps proxies from closing a quiet stream
    tick_s: float = 0.25  #: how often a stream looks at the stop flag
    max_streams: int = 200


class Listening(Protocol):
    def close(self) -> None: ...


#: ``listen(ns, wake)``: a database's wake-up (``PgServeDb.listen``), or ``None``
ListenFn = Callable[[str, Callable[[str, "str | None"], None]], Listening]


@dataclass(frozen=True)
class Snapshot:
    digest: str
    html: str
    trouble: str | None = None  #: why the region may be out of date
    gone: str | None = None  #: the view no longer exists (a run deleted)


def digest_of(html: str) -> str:
    return hashlib.sha256(html.encode()).hexdigest()[:24]


def event(name: str, data: str, *, event_id: str | None = None) -> bytes:
    """One server-sent event; every line break in ``data`` (CR, LF or CRLF) starts a new
    ``data:`` line, so no text can end the event early or forge a field."""
    lines = [f"event: {name}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines += [f"data: {line}" for line in _LINE_BREAK.split(data)]
    return ("\n".join(lines) + "\n\n").encode()


class Feed:
    """One followed view: rendered when it may have changed, announced when it did."""

    def __init__(self, hub: LiveHub, key: tuple[str, ...], ns: str, render: Callable[[], Snapshot]):
        self._hub = hub
        self.key = key
        self.ns = ns
        self._render = render
        self.streams = 0
        self.state: Snapshot | None = None
        self.wake = asyncio.Event()
        self._tick: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None

    def changed(self) -> asyncio.Future[None]:
        """A future done at the next change of :attr:`state`."""
        return self._tick

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.streams:
            started = loop.time()
            try:
                snap = await loop.run_in_executor(self._hub.executor, self._render)
            except Exception as exc:  # the database, mostly: keep the page, say why
                before = self.state or Snapshot("", "")
                if before.trouble is None:  # once per outage, not once a poll
                    self._hub.log.line(f"live view: {type(exc).__name__}; retrying")
                snap = Snapshot(before.digest, before.html, trouble="Live updates paused: the "
                                "state database did not answer; retrying")  # fmt: skip
            if snap != self.state:
                self.state = snap
                tick, self._tick = self._tick, loop.create_future()
                tick.set_result(None)
            # A page that is costly to render (thousands of targets) is rendered less often:
            # at most a fifth of a worker's time goes to following one view.
            interval = max(self._hub.interval(self.ns), 4 * (loop.time() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), interval)
            self.wake.clear()


class LiveHub:
    """The feeds being followed, the streams following them, and the Postgres wake-ups."""

    def __init__(self, *, executor: Executor, settings: LiveSettings, log: LineLog,
                 listen: ListenFn | None, stopping: Callable[[], bool]) -> None:  # fmt: skip
        self.executor = executor
        self.settings = settings
        self.log = log
        self._listen = listen
        self._stopping = stopping
        self._feeds: dict[tuple[str, ...], Feed] = {}
        self._listeners: dict[str, Listening] = {}
        #: the namespaces whose ``LISTEN`` is in place now (the listener said so)
        self.listening: set[str] = set()
        self._streams = 0
        self._lock = threading.Lock()  # the listeners: closed from any thread

    def interval(self, ns: str) -> float:
        """How long a feed of ``ns`` waits for a wake before rendering again: longer while
        a ``LISTEN`` is in place (it wakes the feed), the short poll otherwise."""
        return self.settings.listen_poll_s if ns in self.listening else self.settings.poll_s

    @property
    def full(self) -> bool:
        return self._streams >= self.settings.max_streams

    def _join(self, key: tuple[str, ...], ns: str, render: Callable[[], Snapshot]) -> Feed:
        feed = self._feeds.get(key)
        if feed is None:
            feed = self._feeds[key] = Feed(self, key, ns, render)
            self._start_listening(ns)
        feed.streams += 1
        self._streams += 1
        if feed.task is None or feed.task.done():
            feed.task = asyncio.get_running_loop().create_task(feed.run())
        return feed

    def _leave(self, feed: Feed) -> None:
        feed.streams -= 1
        self._streams -= 1
        if feed.streams == 0:
            self._feeds.pop(feed.key, None)
            feed.wake.set()  # its loop sees no streams and ends
            if not any(f.ns == feed.ns for f in self._feeds.values()):
                self._stop_listening(feed.ns)

    def _start_listening(self, ns: str) -> None:
        if self._listen is None or ns in self._listeners:
            return
        loop = asyncio.get_running_loop()

        def wake(kind: str, run_id: str | None) -> None:  # on the listener's thread
            with contextlib.suppress(RuntimeError):  # the server stopped: its loop is closed
                loop.call_soon_threadsafe(self._heard, ns, kind)

        listener = self._listen(ns, wake)
        with self._lock:
            self._listeners[ns] = listener

    def _heard(self, ns: str, kind: str) -> None:
        """A wake from the ``LISTEN`` of ``ns``: render its feeds now. Once it listens (or
        again), look at once — a change made before the ``LISTEN`` woke nobody; while it is
        lost, poll at the short interval."""
        if kind == "lost":
            self.listening.discard(ns)
            return
        if kind in ("listening", "reconnected") and ns in self._listeners:
            self.listening.add(ns)
        for feed in list(self._feeds.values()):
            if feed.ns == ns:
                feed.wake.set()

    def _stop_listening(self, ns: str) -> None:
        with self._lock:
            listener = self._listeners.pop(ns, None)
        self.listening.discard(ns)
        if listener is not None:  # its close joins a thread: not on the event loop
            asyncio.get_running_loop().run_in_executor(self.executor, listener.close)

    def close(self) -> None:
        """Stop listening (the streams end by themselves on the stop flag)."""
        with self._lock:
            listeners, self._listeners = list(self._listeners.values()), {}
        for listener in listeners:
            listener.close()

    async def stream(
        self, send: Send, receive: Receive, *, key: tuple[str, ...], ns: str,
        render: Callable[[], Snapshot], have: str, still_valid: Callable[[], bool],
    ) -> None:  # fmt: skip
        """Serve one ``EventSource`` until the browser leaves, ``still_valid()`` turns false
        (its session lapsed) or the server stops."""
        feed = self._join(key, ns, render)
        left = asyncio.ensure_future(_disconnected(receive))
        try:
            headers = [(b"Content-Type", b"text/event-stream; charset=utf-8"),
                       (b"Cache-Control", b"no-store"), (b"X-Accel-Buffering", b"no")]  # fmt: skip
            headers += [(k.encode(), v.encode()) for k, v in SAFETY_HEADERS]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await _body(send, b"retry: 2000\n\n")
            await self._follow(send, feed, left, have, still_valid)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            left.cancel()
            self._leave(feed)

    async def _follow(
        self, send: Send, feed: Feed, left: asyncio.Future[Any], have: str,
        still_valid: Callable[[], bool],
    ) -> None:  # fmt: skip
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        trouble: str | None = None
        while not left.done() and not self._stopping():
            if not still_valid():
                await _body(send, event("gone", "Signed out: your session ended; reload to "
                                        "sign in again"))  # fmt: skip
                return
            snap = feed.state
            if snap is not None:
                if snap.gone is not None:
                    await _body(send, event("gone", snap.gone))
                    return
                if snap.digest != have and snap.digest:
                    await _body(send, event("update", snap.html, event_id=snap.digest))
                    have, quiet_since = snap.digest, loop.time()
                if snap.trouble != trouble:
                    trouble = snap.trouble
                    await _body(send, event("stale", trouble or "Live"))
            if loop.time() - quiet_since >= self.settings.heartbeat_s:
                await _body(send, b": still here\n\n")
                quiet_since = loop.time()
            # (asyncio.wait cancels neither: the feed's future is shared by its streams)
            await asyncio.wait({feed.changed(), left}, timeout=self.settings.tick_s,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip


async def _body(send: Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


__all__ = ["Feed", "LiveHub", "LiveSettings", "Snapshot", "digest_of", "event"]
