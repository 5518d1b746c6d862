"""The run journal file format: one file per run, a base record plus appended deltas.

A journal (``<run id>.jsonl``) is ASCII JSON lines, each compact and ending in
``\\n``::

    {"zuke":"run-journal","v":1,"gen":"<uuid hex>","base":<bytes of line 2>}
    {...the full record, wire.record_to_json...}
    {...one RunDelta, wire.delta_to_json...}
    ...

Why a journal: persisting a transition appends one small line, so the bytes a
run writes are linear in its number of transitions; rewriting the record each
time would be quadratic. The file is compacted (rewritten as header + one
record line under a new ``gen``) once the deltas outweigh the base record, so
reads stay proportional to the record's size.

Why the version is ``"<gen>:<length>"``: between two compactions the file only
grows, and every compaction or full write draws a fresh random ``gen``, so
(gen, length of the complete lines) names exactly one content — and a writer
learns it from the header and ``fstat`` without reading, let alone hashing,
the whole file (hashing on every write would be quadratic again).

A last line without its ``\\n`` is the trace of an appender that died
mid-write (or of one still writing while we read): it is ignored, and the next
appender cuts it off before appending.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import TYPE_CHECKING, Any

from zuke._errors import CorruptRecordError
from zuke.state._compact_json import compact_encoder
from zuke.state.records import RunDelta, RunRecord, apply_deltas
from zuke.state.wire import delta_to_json, parse_delta, parse_record, record_to_json

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

KIND = "run-journal"
FORMAT_VERSION = 1
SUFFIX = ".jsonl"
# Compact once the deltas outweigh the base record, but never for less than this:
# tiny records would otherwise be rewritten every few transitions.
COMPACT_MIN_BYTES = 64 * 1024
_HEADER_MAX = 4096


_encode = compact_encoder()


def encode_line(obj: Any) -> bytes:
    """One compact JSON line, newline-terminated.

    ``json.dumps`` escapes raw newlines, so a line never contains one; ASCII
    escaping means any Python string (even a lone surrogate) can be stored.
    """
    return _encode(obj).encode("ascii") + b"\n"


def version_of(gen: str, length: int) -> str:
    return f"{gen}:{length}"


def gen_of(version: str) -> str:
    """The ``gen`` part of a version."""
    return version.partition(":")[0]


def length_of(version: str) -> int:
    """The ``length`` part of a version."""
    return int(version.partition(":")[2])


def compacted(record: RunRecord) -> tuple[bytes, str]:
    """The whole file for ``record`` under a fresh ``gen``, and its version."""
    body = encode_line(record_to_json(record))
    gen = uuid.uuid4().hex
    header = encode_line({"zuke": KIND, "v": FORMAT_VERSION, "gen": gen, "base": len(body)})
    data = header + body
    return data, version_of(gen, len(data))


def delta_line(delta: RunDelta) -> bytes:
    return encode_line(delta_to_json(delta))


@dataclass(frozen=True)
class Header:
    gen: str
    base: int  # byte length of the record line, newline included
    length: int  # byte length of the header line, newline included


def parse_header(line: bytes, where: str) -> Header:
    try:
        obj = json.loads(line)
    except ValueError:
        raise CorruptRecordError(f"state: {where}: line 1 is not a run-journal header") from None
    if not isinstance(obj, dict) or obj.get("zuke") != KIND:
        raise CorruptRecordError(f"state: {where}: line 1 is not a run-journal header")
    if obj.get("v") != FORMAT_VERSION:
        raise CorruptRecordError(
            f"state: {where}: journal format v{obj.get('v')!r} is not supported "
            f"(this zuke reads v{FORMAT_VERSION}); upgrade zuke"
        )
    gen, base = obj.get("gen"), obj.get("base")
    if not isinstance(gen, str) or not gen or ":" in gen:
        raise CorruptRecordError(f'state: {where}: header "gen" must be a non-empty string')
    if not isinstance(base, int) or isinstance(base, bool) or base < 0:
        raise CorruptRecordError(f'state: {where}: header "base" must be a byte count')
    return Header(gen=gen, base=base, length=len(line) + 1)


@dataclass(frozen=True)
class Probe:
    """What a writer needs to know about a journal, learned without reading it all."""

    header: Header
    size: int  # bytes on disk
    valid: int  # bytes up to and including the last newline

    @property
    def version(self) -> str:
        return version_of(self.header.gen, self.valid)

    @property
    def journal_bytes(self) -> int:
        return self.valid - self.header.length - self.header.base

    @property
    def torn(self) -> bool:
        return self.valid != self.size


def probe(path: str, where: str) -> Probe | None:
    """Header, size and valid length of ``path``; ``None`` if it does not exist.

    Reads the header and, only after a crash left a torn tail, scans back for
    the last newline: O(1) I/O in the normal case.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return probe_fd(fd, where)
    finally:
        os.close(fd)


def probe_fd(fd: int, where: str, size: int | None = None) -> Probe:
    if size is None:
        size = os.fstat(fd).st_size
    first = os.pread(fd, _HEADER_MAX, 0)
    end = first.find(b"\n")
    if end < 0:
        raise CorruptRecordError(f"state: {where}: no complete run-journal header")
    header = parse_header(first[:end], where)
    valid = size
    if os.pread(fd, 1, size - 1) != b"\n":
        valid = _last_newline(fd, size) + 1
    if valid < header.length + header.base:
        raise CorruptRecordError(f"state: {where}: the record line is incomplete")
    return Probe(header=header, size=size, valid=valid)


@dataclass(frozen=True)
class Seen:
    """A journal as its index row last saw it: ``length`` complete bytes, and its mtime.

    A journal whose ``stat`` still shows this size (= ``length``) and mtime
    (to the nanosecond, as the filesystem keeps it) has not been written
    since, so its row needs no read at all; one that grew only needs its lines
    after ``length`` checked for a listed field. The inode is left out on
    purpose: a copy that keeps the mtime (``cp -p``, ``rsync -a``) is the
    same content.
    """

    length: int
    mtime_ns: int

    def matches(self, st: os.stat_result) -> bool:
        return st.st_size == self.length and st.st_mtime_ns == self.mtime_ns


def seen(length: int, st: os.stat_result) -> Seen | None:
    """What to remember of a journal just written or read: ``None`` if ``st`` is not of it."""
    return Seen(length, st.st_mtime_ns) if st.st_size == length else None


@dataclass(frozen=True)
class Tail:
    """What a listing needs of a journal beyond its index row, read from its ends."""

    gen: str
    #: ``updatedAt`` of the last delta line; ``None`` if no delta follows the record
    #: line, or if the last line does not start with it (then read the whole journal)
    updated_at: str | None
    deltas: bool
    valid: int  #: bytes up to and including the last newline
    #: whether a complete line after byte ``since`` changes ``status`` or ``actor``
    #: (a listed field); ``None`` when that cannot be told without reading it all
    listed: bool | None
    size: int  #: the file's ``fstat``, taken before anything was read
    mtime_ns: int

    @property
    def seen(self) -> Seen | None:
        """The journal as read here (``None`` with a torn tail: an append in flight)."""
        return Seen(self.valid, self.mtime_ns) if self.size == self.valid else None


_STAMP_PREFIX = b'{"updatedAt":'
_LISTED_KEYS = (b',"status":', b',"actor":')
_TAIL_READ = 4096


def tail(path: str, where: str, *, since: int | None = None) -> Tail | None:
    """The journal's ``gen``, its last delta's ``updatedAt``, and what changed after ``since``.

    A few small reads however long the journal: the header, and the last
    line's first bytes (:func:`delta_line` writes ``updatedAt`` first). With
    ``since`` (the length the index last saw), the lines after it are checked
    for a listed field — usually within the bytes already read.
    ``None`` if the file does not exist.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        st = os.fstat(fd)
        found = probe_fd(fd, where, st.st_size)
        records_end = found.header.length + found.header.base
        stat = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        known = since is not None and records_end <= since <= found.valid
        if found.valid == records_end:
            listed = False if known else None
            return Tail(found.header.gen, None, False, found.valid, listed, **stat)
        span = min(_TAIL_READ, found.valid - records_end)
        chunk_at = found.valid - span
        chunk = os.pread(fd, span, chunk_at)
        at = chunk.rfind(b"\n", 0, len(chunk) - 1)
        if at >= 0:
            start = chunk_at + at + 1
        elif span == found.valid - records_end:
            start = records_end
        else:  # a last line longer than the chunk
            start = _last_newline(fd, found.valid - 1) + 1
        line = chunk[at + 1 :] if at >= 0 else os.pread(fd, 256, start)
        listed = None
        if known:
            assert since is not None
            after = (
                chunk[since - chunk_at :]
                if since >= chunk_at
                else os.pread(fd, found.valid - since, since)
            )
            listed = _changes_listed(after)
        updated_at = _leading_stamp(line)
        return Tail(found.header.gen, updated_at, True, found.valid, listed, **stat)
    finally:
        os.close(fd)


def _changes_listed(lines: bytes) -> bool | None:
    """Whether any of these complete delta lines sets ``status`` or ``actor``.

    :func:`delta_line` writes ``updatedAt`` first and those two right after it,
    so only each line's start is looked at; a line laid out otherwise (not
    written by this code) answers ``None``: read the journal to know.
    """
    for line in lines.split(b"\n")[:-1]:
        if not line.startswith(_STAMP_PREFIX):
            return None
        close = line.find(b'"', len(_STAMP_PREFIX) + 1)  # ISO stamps hold no quote
        if close < 0:
            return None
        if line.startswith(_LISTED_KEYS, close + 1):
            return True
    return False


def _leading_stamp(line: bytes) -> str | None:
    if not line.startswith(_STAMP_PREFIX):
        return None
    text = line[len(_STAMP_PREFIX) : len(_STAMP_PREFIX) + 256].decode("ascii", "replace")
    try:
        value, _ = _DECODER.raw_decode(text)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


_DECODER = json.JSONDecoder()


def _last_newline(fd: int, size: int) -> int:
    chunk = 64 * 1024
    end = size
    while end > 0:
        start = max(0, end - chunk)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at
        end = start
    return -1


def read(data: bytes, where: str) -> tuple[RunRecord, str]:
    """Parse a whole journal: the folded record and its version."""
    valid = data.rfind(b"\n") + 1  # everything after the last newline is a torn append
    lines = data[:valid].split(b"\n")[:-1]
    if not lines:
        raise CorruptRecordError(f"state: {where}: empty run journal")
    header = parse_header(lines[0], where)
    if len(lines) < 2:
        raise CorruptRecordError(f"state: {where}: the record line is missing")
    base = parse_record(_json(lines[1], where, 2), where=where)
    deltas = (
        parse_delta(_json(line, where, n), where=f"{where} line {n}")
        for n, line in enumerate(lines[2:], start=3)
    )
    return apply_deltas(base, deltas), version_of(header.gen, valid)


def _json(line: bytes, where: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:  # UnicodeDecodeError is a ValueError
        raise CorruptRecordError(
            f"state: {where}: line {number} is not valid JSON ({exc})"
        ) from None
