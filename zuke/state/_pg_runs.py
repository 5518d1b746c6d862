"""Run records in Postgres: compare-and-swap on a version, a journal of deltas, indexed listing.

Each write is one statement (a data-modifying ``WITH``, or a function call), so
it is atomic in autocommit mode and costs one round trip:

* a **version** is drawn from the sequence ``zuke_run_versions``, so a run
  deleted and re-created never reuses one (no ABA), and a write lands only
  ``WHERE version = expected``: the row lock of that ``UPDATE`` decides a race.
  The store draws it before the write (in blocks), so a write whose answer
  was lost with its connection is known by it (:func:`version_of`);
* every write also records its **witness** (the write's key and the version
  it made: a row of ``zuke_run_writes``, or for an append its delta's row,
  moved there when a compaction folds the delta) in the same statement, which
  no later write erases: after a lost answer, :func:`witnessed` says whether
  that write landed, whatever other writers did since;
* an **append** — nearly every transition of a run — is one statement
  prepared once per connection (:mod:`._pg_append`; the function
  ``zuke_append`` where a connection cannot keep one): it bumps the version,
  keeps the listing's columns current and inserts the delta and the witness
  in one transaction; reads fold the deltas over the record. Once the deltas
  outweigh the record (and 64 KiB of them gathered) they are folded into it
  in a second, short transaction that holds the row (``FOR UPDATE``) and keeps
  the version: the record it stands for is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from zuke._errors import CorruptRecordError
from zuke.state import _pg_append
from zuke.state._compact_json import compact_encoder
from zuke.state._listing_sql import Position
from zuke.state._listing_sql import listing_sql as shared_listing_sql
from zuke.state._pg_schema import from_db, to_db
from zuke.state._protocol import Conflict, RunQuery, StoredRun, Written
from zuke.state._query import created_ms, limited, since_ms
from zuke.state.records import RunDelta, RunRecord, RunStatus, RunSummary, apply_deltas
from zuke.state.wire import delta_to_json, loads_record, parse_delta, record_to_json

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn

COMPACT_MIN_BYTES = 64 * 1024
#: witnesses older than this are forgotten when the run's journal is compacted
WITNESS_KEEP = "1 day"
#: the witness of a write (``%(key)s``) made by the ``u`` (or ``r``) part of a statement
_WITNESS = (
    "w AS (INSERT INTO zuke_run_writes (ns, run_id, write_key, version)"
    " SELECT ns, id, %(key)s, version FROM {0} WHERE %(key)s::text IS NOT NULL"
    " ON CONFLICT DO NOTHING)"
)


def write_key(version: int) -> str:
    """The witness key of a write known by the version drawn for it (the direct store's)."""
    return f"v:{version}"


#: ``json.dumps(raw, ensure_ascii=False, separators=(",", ":"), allow_nan=False)``, its C
#: encoder made once, as the journal's (``json.dumps`` makes one a call: most of a delta's
#: encoding)
_encode = compact_encoder(ensure_ascii=False, allow_nan=False)


def dumps(raw: Any) -> str:
    """Compact JSON that Postgres ``text`` holds: escaped when it has a lone surrogate."""
    text = _encode(raw)
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError:
            text = json.dumps(raw, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


def parse_version(version: str) -> int | None:
    """A version this store issued, or ``None`` (which matches no row)."""
    return int(version) if version.isascii() and version.isdigit() and len(version) < 19 else None


def _columns(record: RunRecord, text: str) -> dict[str, Any]:
    return {
        "record": text,
        "build": to_db(record.build),
        "root": to_db(record.root_target),
        "status": record.status,
        "actor": to_db(record.actor),
        "created_at": to_db(record.created_at),
        "updated_at": to_db(record.updated_at),
        "created_ms": created_ms(record.created_at),
        "bytes": len(text),
        "names": sorted({to_db(node.name) for node in record.graph}),
    }


#: ``(record text, version, delta texts)`` of a run (ns, id), in one snapshot; also read by
#: the light path (:mod:`._pg_light`), so both read the same statement
ROW_SQL = (
    "SELECT r.record, r.version, ARRAY(SELECT d.delta FROM zuke_run_deltas d"
    " WHERE d.ns = r.ns AND d.run_id = r.id ORDER BY d.seq)"
    " FROM zuke_runs r WHERE r.ns = %s AND r.id = %s"
)


def _row(conn: Conn, ns: str, run_id: str) -> tuple[str, int, list[str]] | None:
    return conn.execute(ROW_SQL, (ns, run_id)).fetchone()


def get(conn: Conn, ns: str, run_id: str) -> StoredRun | None:
    return stored(run_id, _row(conn, ns, run_id))


def stored(run_id: str, row: tuple[str, int | str, list[str]] | None) -> StoredRun | None:
    """The run :data:`ROW_SQL`'s row stands for (``None``: no row)."""
    if row is None:
        return None
    return StoredRun(record=_fold(run_id, row[0], row[2]), version=str(row[1]))


def get_text(conn: Conn, ns: str, run_id: str) -> tuple[str, int] | None:
    """The record's text as written (folded with its journal, if any) and its version.

    For ``zuke serve``, which returns a record as it was sent.
    """
    row = _row(conn, ns, run_id)
    if row is None:
        return None
    text, version, deltas = row
    if deltas:
        text = dumps(record_to_json(_fold(run_id, text, deltas)))
    return text, int(version)


def create(
    conn: Conn,
    ns: str,
    record: RunRecord,
    text: str | None = None,
    *,
    version: int | None = None,
    key: str | None = None,
) -> Written | Conflict:
    """Insert a new run; ``text``, when given, is stored as the record (``zuke serve``).

    ``version``: one drawn beforehand (:meth:`PgDatabase.version`); ``key``: the write's
    witness (:func:`write_key` of the version unless given), so that a lost answer can be
    told from a write that did not land (:func:`witnessed`).
    """
    text = dumps(record_to_json(record)) if text is None else text
    values = {"ns": ns, "id": record.id, "version": version, **_columns(record, text)}
    values["key"] = _key(key, version)
    row = conn.execute(
        "WITH r AS (INSERT INTO zuke_runs (ns, id, version, record, build, root_target, status,"
        " actor, created_at, updated_at, created_ms, base_bytes) VALUES (%(ns)s, %(id)s,"
        " COALESCE(%(version)s::bigint, nextval('zuke_run_versions')), %(record)s, %(build)s,"
        " %(root)s, %(status)s, %(actor)s,"
        " %(created_at)s, %(updated_at)s, %(created_ms)s, %(bytes)s)"
        " ON CONFLICT DO NOTHING RETURNING ns, id, version),"
        " t AS (INSERT INTO zuke_run_targets (ns, run_id, name)"
        " SELECT r.ns, r.id, n FROM r, unnest(%(names)s::text[]) AS n), "
        + _WITNESS.format("r")
        + " SELECT version FROM r",
        values,
    ).fetchone()
    return Conflict() if row is None else Written(version=str(row[0]))


def put(
    conn: Conn,
    ns: str,
    record: RunRecord,
    expected: int,
    text: str | None = None,
    *,
    version: int | None = None,
    key: str | None = None,
) -> Written | Conflict:
    text = dumps(record_to_json(record)) if text is None else text
    values = {"ns": ns, "id": record.id, "expected": expected, "version": version}
    values.update(_columns(record, text), key=_key(key, version))
    row = conn.execute(
        "WITH u AS (UPDATE zuke_runs"
        " SET version = COALESCE(%(version)s::bigint, nextval('zuke_run_versions')),"
        " record = %(record)s, build = %(build)s, root_target = %(root)s, status = %(status)s,"
        " actor = %(actor)s, created_at = %(created_at)s, updated_at = %(updated_at)s,"
        " created_ms = %(created_ms)s, base_bytes = %(bytes)s, journal_bytes = 0"
        " WHERE ns = %(ns)s AND id = %(id)s AND version = %(expected)s RETURNING ns, id, version),"
        " dd AS (DELETE FROM zuke_run_deltas d USING u WHERE d.ns = u.ns AND d.run_id = u.id"
        " RETURNING d.ns, d.run_id, d.write_key, d.made),"
        # the journal's witnesses outlive it (schema 4: an append's rides in its delta's row)
        " kw AS (INSERT INTO zuke_run_writes (ns, run_id, write_key, version)"
        " SELECT ns, run_id, write_key, made FROM dd WHERE write_key IS NOT NULL"
        " ON CONFLICT DO NOTHING),"
        # names that stay are kept, so the insert below never meets a row this deletes
        " dt AS (DELETE FROM zuke_run_targets t USING u WHERE t.ns = u.ns AND t.run_id = u.id"
        " AND NOT (t.name = ANY(%(names)s::text[]))),"
        " it AS (INSERT INTO zuke_run_targets (ns, run_id, name)"
        " SELECT u.ns, u.id, n FROM u, unnest(%(names)s::text[]) AS n ON CONFLICT DO NOTHING), "
        + _WITNESS.format("u")
        + " SELECT version FROM u",
        values,
    ).fetchone()
    return Conflict() if row is None else Written(version=str(row[0]))


def append(
    conn: Conn,
    ns: str,
    run_id: str,
    delta: RunDelta,
    expected: int,
    *,
    version: int | None = None,
    after: RunRecord | Callable[[], RunRecord] | None = None,
    key: str | None = None,
) -> Written | Conflict:
    """Append ``delta`` if the run is at ``expected``; ``after``, when the caller knows it, is
    the record the delta makes (or a function making it, called only then) — a compaction
    due then writes it instead of reading back and folding the whole journal
    (:func:`_compact_known`)."""
    line = dumps(delta_to_json(delta))
    made = _pg_append.append(
        conn, ns, run_id, expected, version, _key(key, version), to_db(delta.updated_at),
        delta.status, None if delta.actor is None else to_db(delta.actor), line,
        COMPACT_MIN_BYTES, signal=bool(delta.signals),
    )  # fmt: skip
    return appended(conn, ns, run_id, made, after)


def appended(
    conn: Conn,
    ns: str,
    run_id: str,
    made: int | None,
    after: RunRecord | Callable[[], RunRecord] | None,
) -> Written | Conflict:
    """What an append answered (``made``: :func:`._pg_append.append`'s), the compaction it
    asked for done on ``conn``."""
    if made is None:
        return Conflict()
    if made < 0:
        if after is None:
            _compact(conn, ns, run_id)
        else:
            _compact_known(conn, ns, run_id, -made, after() if callable(after) else after)
    return Written(version=str(abs(made)))


def _key(key: str | None, version: int | None) -> str | None:
    return key if key is not None or version is None else write_key(version)


def witnessed(conn: Conn, ns: str, run_id: str, key: str) -> tuple[int | None, int | None]:
    """``(the version the write keyed ``key`` made, or None; the run's version now, or
    None)`` in one snapshot: whether a write whose answer was lost landed — kept whatever
    was written after it — and, if not, whether it still can. An append's witness is in
    its delta's row until a compaction moves it to ``zuke_run_writes``."""
    row = conn.execute(
        "SELECT COALESCE((SELECT version FROM zuke_run_writes WHERE ns = %(ns)s"
        " AND run_id = %(id)s AND write_key = %(key)s), (SELECT made FROM zuke_run_deltas"
        " WHERE ns = %(ns)s AND run_id = %(id)s AND write_key = %(key)s LIMIT 1)),"
        " (SELECT version FROM zuke_runs WHERE ns = %(ns)s AND id = %(id)s)",
        {"ns": ns, "id": run_id, "key": key},
    ).fetchone()
    if row is None:
        return None, None
    return (None if row[0] is None else int(row[0])), (None if row[1] is None else int(row[1]))


def version_of(conn: Conn, ns: str, run_id: str) -> int | None:
    """The run's version now (``None``: no such run): whether a write whose answer was lost
    landed (its drawn version) or not (still the expected one)."""
    row = conn.execute(
        "SELECT version FROM zuke_runs WHERE ns = %s AND id = %s", (ns, run_id)
    ).fetchone()
    return None if row is None else int(row[0])


def _compact_known(conn: Conn, ns: str, run_id: str, version: int, record: RunRecord) -> None:
    """Replace the run's record and journal by ``record``, what they fold to at ``version``
    — one statement, and only while the run is still at ``version`` (a write since then
    made another record: its own append compacts, later)."""
    text = dumps(record_to_json(record))
    conn.execute(
        "WITH u AS (UPDATE zuke_runs SET record = %(record)s, base_bytes = %(bytes)s,"
        " journal_bytes = 0 WHERE ns = %(ns)s AND id = %(id)s AND version = %(version)s"
        " RETURNING ns, id),"
        f" old AS (DELETE FROM zuke_run_writes o USING u WHERE o.ns = u.ns AND o.run_id = u.id"
        f" AND o.at < clock_timestamp() - interval '{WITNESS_KEEP}'),"
        " gone AS (DELETE FROM zuke_run_deltas d USING u WHERE d.ns = u.ns AND d.run_id = u.id"
        " RETURNING d.ns, d.run_id, d.write_key, d.made)"
        " INSERT INTO zuke_run_writes (ns, run_id, write_key, version)"  # the witnesses kept
        " SELECT ns, run_id, write_key, made FROM gone WHERE write_key IS NOT NULL"
        " ON CONFLICT DO NOTHING",
        {"record": text, "bytes": len(text), "ns": ns, "id": run_id, "version": version},
    )


def _compact(conn: Conn, ns: str, run_id: str) -> None:
    """Fold the run's deltas into its record, keeping its version (the record is the same)."""
    with conn.transaction():
        row = conn.execute(
            "SELECT record FROM zuke_runs WHERE ns = %s AND id = %s FOR UPDATE", (ns, run_id)
        ).fetchone()
        if row is None:
            return
        deltas = [d for (d,) in conn.execute(
            "SELECT delta FROM zuke_run_deltas WHERE ns = %s AND run_id = %s ORDER BY seq",
            (ns, run_id),
        )]  # fmt: skip
        text = dumps(record_to_json(_fold(run_id, row[0], deltas)))
        conn.execute(  # the deltas' witnesses outlive them
            "INSERT INTO zuke_run_writes (ns, run_id, write_key, version) SELECT ns, run_id,"
            " write_key, made FROM zuke_run_deltas WHERE ns = %s AND run_id = %s"
            " AND write_key IS NOT NULL ON CONFLICT DO NOTHING",
            (ns, run_id),
        )
        conn.execute("DELETE FROM zuke_run_deltas WHERE ns = %s AND run_id = %s", (ns, run_id))
        conn.execute(
            "DELETE FROM zuke_run_writes WHERE ns = %s AND run_id = %s"
            f" AND at < clock_timestamp() - interval '{WITNESS_KEEP}'",
            (ns, run_id),
        )
        conn.execute(
            "UPDATE zuke_runs SET record = %s, base_bytes = %s, journal_bytes = 0"
            " WHERE ns = %s AND id = %s",
            (text, len(text), ns, run_id),
        )


def delete(conn: Conn, ns: str, run_id: str) -> bool:
    """Remove the run and what is its (call inside a transaction); whether it was there.

    Its deltas, witnesses and target names, which have no foreign key (schema 4: the
    check cost every append; schema 5: a look-up per target at creation), go by the
    statements after the row's: the row's ``DELETE`` waits for an append in flight, and
    each later statement sees what that append committed, while an append after it finds
    no row to update.
    """
    cursor = conn.execute("DELETE FROM zuke_runs WHERE ns = %s AND id = %s", (ns, run_id))
    conn.execute("DELETE FROM zuke_run_targets WHERE ns = %s AND run_id = %s", (ns, run_id))
    conn.execute("DELETE FROM zuke_run_deltas WHERE ns = %s AND run_id = %s", (ns, run_id))
    conn.execute("DELETE FROM zuke_run_writes WHERE ns = %s AND run_id = %s", (ns, run_id))
    return cursor.rowcount > 0


def listing(
    conn: Conn, ns: str, query: RunQuery, *, before: Position | None = None
) -> list[RunSummary]:
    """Summaries newest first (``createdAt`` as a time, then id), every filter from an index;
    ``before``: see :func:`listing_sql`."""
    sql, args = listing_sql(ns, query, before=before)
    return summaries(conn.execute(sql, args).fetchall())


def listing_sql(
    ns: str, query: RunQuery, *, before: Position | None = None
) -> tuple[bytes, list[str | int]]:
    """:func:`listing`'s statement and arguments (the light path reads the same one); the
    filters, order and ``before`` are :func:`~._listing_sql.listing_sql`'s."""
    sql, args = shared_listing_sql(
        runs="zuke_runs", targets="zuke_run_targets", mark="%s", ns=ns,
        status=_text(query.status), build=_text(query.build), since_ms=since_ms(query),
        target=_text(query.target), before=before, limit=limited(query), nulls_last=True,
    )  # fmt: skip
    return sql.encode(), args


def _text(value: str | None) -> str | None:
    return None if value is None else to_db(value)


def summaries(rows: Iterable[Sequence[Any]]) -> list[RunSummary]:
    """:func:`listing_sql`'s rows as summaries."""
    return [
        RunSummary(
            id=row[0], build=from_db(row[1]), root_target=from_db(row[2]),
            status=cast(RunStatus, row[3]), actor=from_db(row[4]),
            created_at=from_db(row[5]), updated_at=from_db(row[6]),
        )
        for row in rows
    ]  # fmt: skip


def _fold(run_id: str, text: str, deltas: list[str]) -> RunRecord:
    where = f"run {run_id!r}"
    record = loads_record(text, where=where)
    if not deltas:
        return record
    try:
        parsed = [parse_delta(json.loads(d), where=f"{where} journal") for d in deltas]
    except ValueError as exc:
        raise CorruptRecordError(f"state: {where}'s journal is not valid JSON ({exc})") from None
    return apply_deltas(record, parsed)


__all__ = [
    "ROW_SQL", "Position", "append", "create", "delete", "dumps", "get", "get_text", "listing",
    "listing_sql", "parse_version", "put", "stored", "summaries", "version_of", "witnessed",
    "write_key",
]  # fmt: skip
