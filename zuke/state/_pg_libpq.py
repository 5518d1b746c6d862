"""The store's statements on a libpq connection through :mod:`ctypes`, without psycopg.

``import psycopg`` and its pool cost 60 to 150 ms: as much as a whole 1000-target
run on the filesystem store takes. So the light path (:mod:`._pg_light`) runs the
store's own statements — the same SQL text, in :mod:`._pg_runs` and :mod:`._pg_locks`
— on :class:`LibpqConnection`, which answers the few calls those functions make of a
psycopg connection (``execute(sql, params)``, ``fetchone``/``fetchall``/``rowcount``,
``transaction()``), and nothing more:

* parameters are psycopg's placeholders (``%s``, ``%(name)s``) as libpq's ``$n``;
  ``str`` goes as an untyped literal (what psycopg sends), ``int`` as ``int8``,
  ``bytes`` as ``bytea``, a list of ``str`` as ``text[]``, ``None`` as NULL;
* values come back typed as psycopg types them for these statements (integers,
  booleans, ``text[]`` as a list, ``bytea`` as bytes; everything else as text);
* a statement run a second time is prepared, once per connection (as psycopg does
  after five), so the run's appends skip the server's planning;
* a failure is never interpreted here: :class:`LibpqLost` (the connection broke: a
  write sent may have landed) or :class:`LibpqFailed` (the server refused the
  statement and rolled it back, or it was never sent). The light path then leaves
  the call, and every later one, to the full store, whose
  :meth:`~._pg_conn.PgDatabase.call` retries it and checks whether a lost write
  landed — so the guarantees are the store's, in one place.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from functools import lru_cache
from typing import Any

_PGRES_COMMAND_OK = 1
_PGRES_TUPLES_OK = 2
_CONNECTION_OK = 0
_PG_DIAG_SQLSTATE = ord("C")
_BOOL, _BYTEA, _INT8, _INT2, _INT4, _OID, _TEXT_ARRAY = 16, 17, 20, 21, 23, 26, 1009
_INTEGERS = frozenset({_INT8, _INT2, _INT4, _OID})
#: SQLSTATEs that end the connection (as :func:`._pg_conn.lost_connection` reads them)
_GONE_STATES = frozenset({"57P01", "57P02", "57P03"})
_PLACEHOLDER = re.compile(rb"%\((\w+)\)s|%s|%%")
_ELEMENT = re.compile(r'"((?:[^"\\]|\\.)*)"|([^,{}]+)', re.DOTALL)


class LibpqLost(Exception):
    """The connection broke during a statement: a write sent may or may not have landed."""


class LibpqFailed(Exception):
    """The statement was refused by the server (and rolled back) or never sent."""


def declare(lib: ctypes.CDLL) -> None:
    """Give the functions :class:`LibpqConnection` calls their C types."""
    p, s, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    strings = ctypes.POINTER(ctypes.c_char_p)
    oids = ctypes.POINTER(ctypes.c_uint)
    for name, args, result in (
        ("PQexecParams", [p, s, i, oids, strings, p, p, i], p),
        ("PQprepare", [p, s, s, i, oids], p),
        ("PQexecPrepared", [p, s, i, strings, p, p, i], p),
        ("PQftype", [p, i], ctypes.c_uint),
        ("PQcmdTuples", [p], s),
        ("PQresultErrorField", [p, i], s),
        ("PQstatus", [p], i),
    ):
        function = getattr(lib, name)
        function.argtypes, function.restype = args, result


@lru_cache(maxsize=256)  # the store's statements are a handful of texts, run many times
def placeholders(sql: bytes) -> tuple[bytes, tuple[str | int, ...]]:
    """``sql`` with ``$n`` for psycopg's placeholders, and what each ``$n`` takes: a name
    (``%(name)s``, the same name the same ``$n``) or a position (``%s``)."""
    order: list[str | int] = []
    position = 0

    def number(match: re.Match[bytes]) -> bytes:
        nonlocal position
        if match.group() == b"%%":
            return b"%"
        if match.group(1) is not None:
            name = match.group(1).decode()
            if name not in order:
                order.append(name)
            return b"$%d" % (order.index(name) + 1)
        order.append(position)
        position += 1
        return b"$%d" % len(order)

    return _PLACEHOLDER.sub(number, sql), tuple(order)


def text_array(text: str) -> list[str]:
    """A one-dimensional ``text[]`` in Postgres' text output (``{"a","b\\"c",d}``); no NULLs."""
    items = []
    for match in _ELEMENT.finditer(text, 1, len(text) - 1):
        quoted, bare = match.groups()
        if bare is not None:
            if bare.upper() == "NULL":
                raise ValueError("a NULL element")
            items.append(bare.strip())
        elif "\\" in quoted:  # only \\ and \" are escaped; text holds no NUL to stand in
            items.append(quoted.replace("\\\\", "\0").replace('\\"', '"').replace("\0", "\\"))
        else:
            items.append(quoted)
    return items


def _array(items: Sequence[str]) -> str:
    quoted = (item.replace("\\", "\\\\").replace('"', '\\"') for item in items)
    return "{" + ",".join(f'"{item}"' for item in quoted) + "}"


def adapt(value: object) -> tuple[bytes | None, int]:
    """A parameter as libpq's text and type OID (0: the server infers it, as for psycopg's
    ``str``)."""
    if value is None:
        return None, 0
    if isinstance(value, bool):
        return (b"t" if value else b"f"), _BOOL
    if isinstance(value, int):
        return str(value).encode(), _INT8
    if isinstance(value, str):
        return value.encode(), 0  # UnicodeError (a lone surrogate): not sent
    if isinstance(value, bytes):
        return b"\\x" + value.hex().encode(), _BYTEA
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return _array(value).encode(), _TEXT_ARRAY
    raise LibpqFailed(f"no light adaptation for a {type(value).__name__}")


def _value(text: bytes, oid: int) -> Any:
    if oid in _INTEGERS:
        return int(text)
    if oid == _BOOL:
        return text == b"t"
    if oid == _BYTEA:
        return bytes.fromhex(text[2:].decode())
    decoded = text.decode()
    return text_array(decoded) if oid == _TEXT_ARRAY else decoded


class LibpqCursor:
    """The rows of one statement, as psycopg's cursor hands them to the store's functions."""

    def __init__(self, rows: list[tuple[Any, ...]], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def fetchone(self) -> tuple[Any, ...] | None:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return list(self._rows)

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self._rows)


class LibpqConnection:
    """One open libpq connection (``PGconn *``) in autocommit, for one thread at a time.

    ``prepared`` maps a statement (its text and parameter types) to its prepared name,
    or to ``None`` after its first run; it belongs to the connection.
    """

    def __init__(
        self,
        lib: ctypes.CDLL,
        conn: int,
        prepared: dict[tuple[bytes, tuple[int, ...]], bytes | None],
    ) -> None:
        self._lib = lib
        self._conn = conn
        self._prepared = prepared
        #: statements sent on this connection by this object (a failure after the first
        #: leaves a write unsure)
        self.sent = 0

    def execute(
        self, sql: str | bytes, params: Sequence[Any] | Mapping[str, Any] | None = None
    ) -> LibpqCursor:
        raw = sql.encode() if isinstance(sql, str) else sql
        text, order = placeholders(raw)
        given: Any = {} if params is None else params
        try:
            adapted = [adapt(given[key]) for key in order]
        except (UnicodeError, KeyError, IndexError, TypeError) as exc:
            raise LibpqFailed(f"a parameter the light path cannot send ({exc})") from None
        values = (ctypes.c_char_p * (len(adapted) + 1))(*(v for v, _ in adapted), None)
        types = tuple(oid for _, oid in adapted)
        oids = (ctypes.c_uint * (len(types) + 1))(*types, 0)
        lib, key = self._lib, (text, types)
        self.sent += 1
        if key not in self._prepared:
            self._prepared[key] = None
            result = lib.PQexecParams(self._conn, text, len(types), oids, values, None, None, 0)
        else:
            name = self._prepared[key]
            if name is None:  # the second run: prepare it, for this and every later run
                name = b"zuke_%d" % sum(1 for n in self._prepared.values() if n is not None)
                self._check(lib.PQprepare(self._conn, name, text, len(types), oids), prepare=True)
                self._prepared[key] = name
            result = lib.PQexecPrepared(self._conn, name, len(types), values, None, None, 0)
        return self._check(result)

    def _check(self, result: int | None, *, prepare: bool = False) -> LibpqCursor:
        lib = self._lib
        if not result:
            raise LibpqLost("no result (the connection broke, or libpq ran out of memory)")
        try:
            status = lib.PQresultStatus(result)
            if status not in (_PGRES_COMMAND_OK, _PGRES_TUPLES_OK):
                state = (lib.PQresultErrorField(result, _PG_DIAG_SQLSTATE) or b"").decode()
                if (
                    lib.PQstatus(self._conn) != _CONNECTION_OK
                    or state in _GONE_STATES
                    or state.startswith("08")
                    or not state
                ):
                    raise LibpqLost(f"the connection broke (SQLSTATE {state or 'none'})")
                raise LibpqFailed(f"the server refused the statement (SQLSTATE {state})")
            if prepare:
                return LibpqCursor([], 0)
            width = lib.PQnfields(result)
            types = [lib.PQftype(result, col) for col in range(width)]
            rows = [
                tuple(
                    None
                    if lib.PQgetisnull(result, row, col)
                    else _value(
                        ctypes.string_at(
                            lib.PQgetvalue(result, row, col), lib.PQgetlength(result, row, col)
                        ),
                        types[col],
                    )
                    for col in range(width)
                )
                for row in range(lib.PQntuples(result))
            ]
            affected = lib.PQcmdTuples(result) or b""
            return LibpqCursor(rows, int(affected) if affected.isdigit() else -1)
        finally:
            lib.PQclear(result)

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """``BEGIN`` … ``COMMIT`` (``ROLLBACK`` if the block raised)."""
        self.execute(b"BEGIN")
        try:
            yield
        except BaseException:
            with suppress(LibpqLost, LibpqFailed):
                self.execute(b"ROLLBACK")
            raise
        self.execute(b"COMMIT")


__all__ = [
    "LibpqConnection", "LibpqFailed", "LibpqLost", "adapt", "declare", "placeholders", "text_array",
]  # fmt: skip
