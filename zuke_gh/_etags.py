"""The ETag cache behind conditional GETs.

GitHub does not count a ``304 Not Modified`` against the rate limit, so a gate
polling a workflow's runs every few seconds costs nothing while nothing
changes. The cache keeps the last 200 answer per URL (query included) with its
``ETag``; the raw bytes are kept, not the parsed body, so a caller that mutates
what it got cannot change what the next caller is served. Bounded (least
recently used goes first) and safe across threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True)
class CachedAnswer:
    etag: str
    status: int
    content: bytes
    link: str | None = None


class EtagCache:
    def __init__(self, max_entries: int = 256) -> None:
        self._max = max_entries
        self._entries: OrderedDict[str, CachedAnswer] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, url: str) -> CachedAnswer | None:
        with self._lock:
            entry = self._entries.get(url)
            if entry is not None:
                self._entries.move_to_end(url)
            return entry

    def put(self, url: str, entry: CachedAnswer) -> None:
        if self._max <= 0:
            return
        with self._lock:
            self._entries[url] = entry
            self._entries.move_to_end(url)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
