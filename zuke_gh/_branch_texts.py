"""Texts of the state branch's files, kept by blob SHA across heads.

Why: a sweep reads every waiting run's record, and the branch's head moves under
it (its own commits, other writers'). A git blob SHA names its content for good,
so a text read once at any head is the text at every head where the path still
has that SHA: a record the head's move did not touch is served from here, with no
GraphQL point, and a changed record (a new SHA) can never be answered from here.

Bounded by characters, least recently used first out, so a process that reads a
few wide fan-out records (hundreds of kilobytes each) keeps its memory bounded.
"""

from __future__ import annotations

from collections import OrderedDict

#: What the cache holds at most, in characters: a thousand 30 kB records.
MAX_CHARS = 32_000_000
#: A text larger than this is not kept (it would push out dozens of records).
MAX_ITEM_CHARS = MAX_CHARS // 8


class TextCache:
    """blob SHA -> text, least recently used out past ``max_chars``."""

    def __init__(self, max_chars: int = MAX_CHARS, max_item_chars: int = MAX_ITEM_CHARS) -> None:
        self.max_chars, self.max_item_chars = max_chars, max_item_chars
        self._texts: OrderedDict[str, str] = OrderedDict()
        self._chars = 0

    def __len__(self) -> int:
        return len(self._texts)

    @property
    def chars(self) -> int:
        return self._chars

    def get(self, oid: str) -> str | None:
        text = self._texts.get(oid)
        if text is not None:
            self._texts.move_to_end(oid)
        return text

    def put(self, oid: str, text: str) -> None:
        """Keep ``text`` as the content of blob ``oid`` (the caller read it as that blob)."""
        if len(text) > self.max_item_chars:
            return
        old = self._texts.pop(oid, None)
        if old is not None:
            self._chars -= len(old)
        self._texts[oid] = text
        self._chars += len(text)
        while self._chars > self.max_chars:
            _, dropped = self._texts.popitem(last=False)
            self._chars -= len(dropped)
