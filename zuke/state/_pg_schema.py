"""The Postgres store's schema, its versions, and how values that Postgres text refuses are kept.

The schema is versioned in ``zuke_schema_version`` (one row per version
applied). A store opened on a database at an older version migrates it on
first use, inside one transaction that holds ``pg_advisory_xact_lock`` — a
transaction-scoped lock, released at commit, so it pins no pooled connection
— so two processes opening one database at once migrate it exactly once. A
database written by a newer zuke is refused.

The tables mirror ``zuke serve``'s SQLite design (``zuke/_serve/schema.py``):
runs keyed by ``(ns, id)`` with the columns a listing needs beside the record
text, graph node names for the ``target`` filter, a journal of deltas, lock
rows that keep their fence, and the build catalog (for ``zuke serve --db
postgresql://``, not used by the direct store yet). Identifiers are
``COLLATE "C"``, so ``ORDER BY`` is code-point order (what Python's ``sorted``
gives) and the indexes serve it. Every table is prefixed ``zuke_``: the
database may be shared with other applications.

Version 2 adds the triggers that ``NOTIFY zuke_runs`` when a run parks or a
signal is appended, so a watching sweeper (:mod:`._pg_listen`) wakes at once.

Version 3 adds the witnesses that decide a lost answer: ``zuke_run_writes``,
one row per write of a run (its key — the version drawn for it, or the
idempotency key ``zuke serve`` was sent — and the version it made), and
``zuke_lock_grants``, one row per acquisition (the token's hash and fence).
No later write erases them (a compaction folds the journal, not these; they
go with the run, or after a day), so a write that landed is known as landed
whatever landed after it.

Version 4 makes the append — the one write of nearly every transition —
cheaper for the server: it drops the foreign keys of the journal and the
witnesses, whose check cost each append a look-up of the run row it had just
updated (:func:`zuke.state._pg_runs.delete` removes a run's deltas and
witnesses itself, after its row); it keeps an append's witness in its delta row
(``write_key``, ``made``: an insert less; a compaction moves them to
``zuke_run_writes``, so they still outlive the journal); it replaces the
trigger that woke sweepers for a signal by the append's own ``pg_notify``
(``zuke_notify``, the same payload: a trigger is looked at on every append);
and it adds ``zuke_append``, the append as one call of a PL/pgSQL function,
which plans its statements once per connection: a statement sent as text is
parsed and planned on every call (psycopg2 has no protocol-level prepared
statements). :mod:`._pg_append` ``PREPARE``s the append on each connection,
faster still; the function is what it calls where a connection cannot keep a
prepared statement (a transaction pooler such as PgBouncer hands each
statement to any server connection), and for the rare append that changes a
run's status or carries a signal.

Version 5 makes a run's creation and its compactions cheaper for the server
(issue 28 §2): it drops the foreign key of ``zuke_run_targets``, whose check
was a look-up per graph node (a thousand for a 1000-target build: about a
third of the creation's time in the server; :func:`zuke.state._pg_runs.delete`
removes a run's target names itself, in the transaction that removes its row),
and, where the server has it (built with lz4: most packaged servers since
14), compresses the record with lz4 instead of pglz — each creation and
compaction compresses the whole record again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zuke._errors import StateError

if TYPE_CHECKING:
    from zuke.state._pg_pool import PgConn as Conn

SCHEMA_VERSION = 5
#: ``pg_advisory_xact_lock`` key of a migration ("zuke" in ASCII)
MIGRATION_LOCK = 0x7A756B65

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS zuke_schema_version (
    version integer PRIMARY KEY,
    migrated_at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

#: the channel :mod:`._pg_listen` listens on (``zuke resume --check --watch``)
WAKE_CHANNEL = "zuke_runs"

#: version -> the statements that bring a database from the version before to it: one text
#: split at ``;``, or a tuple of statements (a function body has ``;`` of its own)
MIGRATIONS: dict[int, str | tuple[str, ...]] = {
    1: """
CREATE SEQUENCE zuke_run_versions;
CREATE TABLE zuke_runs (
    ns text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    record text NOT NULL,
    build text NOT NULL,
    root_target text NOT NULL,
    status text NOT NULL,
    actor text NOT NULL,
    created_at text NOT NULL,
    updated_at text NOT NULL,
    created_ms bigint,
    base_bytes bigint NOT NULL,
    journal_bytes bigint NOT NULL DEFAULT 0,
    last_seq bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (ns, id)
);
CREATE INDEX zuke_runs_by_time ON zuke_runs (ns, created_ms DESC NULLS LAST, id DESC);
CREATE INDEX zuke_runs_by_status ON zuke_runs (ns, status, created_ms DESC NULLS LAST, id DESC);
CREATE INDEX zuke_runs_by_build ON zuke_runs (ns, build, created_ms DESC NULLS LAST, id DESC);
CREATE TABLE zuke_run_targets (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    name text COLLATE "C" NOT NULL,
    PRIMARY KEY (ns, run_id, name),
    FOREIGN KEY (ns, run_id) REFERENCES zuke_runs (ns, id) ON DELETE CASCADE
);
CREATE INDEX zuke_run_targets_by_name ON zuke_run_targets (ns, name, run_id);
CREATE TABLE zuke_run_deltas (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    delta text NOT NULL,
    PRIMARY KEY (ns, run_id, seq),
    FOREIGN KEY (ns, run_id) REFERENCES zuke_runs (ns, id) ON DELETE CASCADE
);
CREATE TABLE zuke_locks (
    ns text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    token_sha256 bytea,
    holder text,
    run_id text COLLATE "C",
    expires_at timestamptz,
    fence bigint NOT NULL,
    PRIMARY KEY (ns, key)
);
CREATE INDEX zuke_locks_by_run ON zuke_locks (ns, run_id) WHERE token_sha256 IS NOT NULL;
CREATE TABLE zuke_fence_floors (
    ns text COLLATE "C" PRIMARY KEY,
    floor bigint NOT NULL
);
CREATE TABLE zuke_builds (
    ns text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    descriptor text NOT NULL,
    name text NOT NULL,
    actor text NOT NULL,
    created_at text NOT NULL,
    created_ms bigint NOT NULL,
    updated_at text NOT NULL,
    PRIMARY KEY (ns, id)
);
CREATE INDEX zuke_builds_by_time ON zuke_builds (ns, created_ms DESC, id DESC);
CREATE INDEX zuke_builds_by_name ON zuke_builds (ns, name, created_ms DESC, id DESC)
""",
    # A sweep's wake-up call (NOTIFY): a run parked (its status became suspended) or a
    # signal appended to a run. The payload is the run's namespace, id and status, never
    # record data; NOTIFY refuses payloads of 8000 bytes or more, so an outsized one (a
    # very long namespace) becomes "{}", which still wakes a sweep. A sweep's own check
    # stamps neither park a run nor carry a signal, so they wake nobody. The signal test
    # reads the compact JSON text; a "signals" key inside a target's data may wake a sweep
    # for nothing, which costs one sweep.
    2: (
        """
CREATE FUNCTION zuke_notify_run() RETURNS trigger LANGUAGE plpgsql AS $zuke$
DECLARE
    run_status text;
    payload text;
BEGIN
    IF TG_TABLE_NAME = 'zuke_run_deltas' THEN
        SELECT status INTO run_status FROM zuke_runs WHERE ns = NEW.ns AND id = NEW.run_id;
        payload := json_build_object('ns', NEW.ns, 'id', NEW.run_id, 'status', run_status)::text;
    ELSE
        payload := json_build_object('ns', NEW.ns, 'id', NEW.id, 'status', NEW.status)::text;
    END IF;
    IF octet_length(payload) >= 7900 THEN
        payload := '{}';
    END IF;
    PERFORM pg_notify('zuke_runs', payload);
    RETURN NULL;
END
$zuke$""",
        "CREATE TRIGGER zuke_runs_created_parked AFTER INSERT ON zuke_runs FOR EACH ROW"
        " WHEN (NEW.status = 'suspended') EXECUTE FUNCTION zuke_notify_run()",
        "CREATE TRIGGER zuke_runs_parked AFTER UPDATE OF status ON zuke_runs FOR EACH ROW"
        " WHEN (NEW.status = 'suspended' AND OLD.status IS DISTINCT FROM NEW.status)"
        " EXECUTE FUNCTION zuke_notify_run()",
        "CREATE TRIGGER zuke_run_signalled AFTER INSERT ON zuke_run_deltas FOR EACH ROW"
        """ WHEN (strpos(NEW.delta, '"signals":{') > 0) EXECUTE FUNCTION zuke_notify_run()""",
    ),
    # The witnesses of lost answers (see the module docstring).
    3: """
CREATE TABLE zuke_run_writes (
    ns text COLLATE "C" NOT NULL,
    run_id text COLLATE "C" NOT NULL,
    write_key text COLLATE "C" NOT NULL,
    version bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (ns, run_id, write_key),
    FOREIGN KEY (ns, run_id) REFERENCES zuke_runs (ns, id) ON DELETE CASCADE
);
CREATE TABLE zuke_lock_grants (
    ns text COLLATE "C" NOT NULL,
    key text COLLATE "C" NOT NULL,
    token_sha256 bytea NOT NULL,
    fence bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (ns, key, token_sha256)
)
""",
    # The append's cost (see the module docstring): the journal's and the witnesses' foreign
    # keys dropped; an append's witness kept in its delta row (write_key, made), moved to
    # zuke_run_writes when a compaction folds the delta; the trigger that woke a sweeper for
    # a signal replaced by the append's own pg_notify (zuke_notify: the same payload); and
    # zuke_append, the append as one function call. It returns the version made — negated
    # when a compaction is due (versions are positive) — or NULL when the run is not at the
    # expected version (a conflict). Its UPDATE names status and actor only when the delta
    # sets one: an append that changes neither leaves the parking trigger (AFTER UPDATE OF
    # status) out of it.
    4: (
        """
DO $zuke$
DECLARE
    fk record;
BEGIN
    FOR fk IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint
              WHERE contype = 'f'
                AND conrelid IN ('zuke_run_deltas'::regclass, 'zuke_run_writes'::regclass)
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tab, fk.conname);
    END LOOP;
END
$zuke$""",
        'ALTER TABLE zuke_run_deltas ADD COLUMN write_key text COLLATE "C", ADD COLUMN made bigint',
        "DROP TRIGGER zuke_run_signalled ON zuke_run_deltas",
        """
CREATE FUNCTION zuke_notify(p_ns text, p_id text, p_status text) RETURNS void
LANGUAGE plpgsql AS $zuke$
DECLARE
    payload text := json_build_object('ns', p_ns, 'id', p_id, 'status', p_status)::text;
BEGIN
    IF octet_length(payload) >= 7900 THEN
        payload := '{}';
    END IF;
    PERFORM pg_notify('zuke_runs', payload);
END
$zuke$""",
        """
CREATE FUNCTION zuke_append(p_ns text, p_id text, p_expected bigint, p_version bigint,
    p_key text, p_updated text, p_status text, p_actor text, p_delta text, p_compact bigint,
    p_signal boolean)
RETURNS bigint LANGUAGE plpgsql AS $zuke$
DECLARE
    v_made bigint;
    v_seq bigint;
    v_base bigint;
    v_journal bigint;
    v_status text;
BEGIN
    IF p_status IS NULL AND p_actor IS NULL THEN
        UPDATE zuke_runs SET version = COALESCE(p_version, nextval('zuke_run_versions')),
            updated_at = p_updated, journal_bytes = journal_bytes + length(p_delta),
            last_seq = last_seq + 1
        WHERE ns = p_ns AND id = p_id AND version = p_expected
        RETURNING version, last_seq, base_bytes, journal_bytes, status
        INTO v_made, v_seq, v_base, v_journal, v_status;
    ELSE
        UPDATE zuke_runs SET version = COALESCE(p_version, nextval('zuke_run_versions')),
            updated_at = p_updated, status = COALESCE(p_status, status),
            actor = COALESCE(p_actor, actor), journal_bytes = journal_bytes + length(p_delta),
            last_seq = last_seq + 1
        WHERE ns = p_ns AND id = p_id AND version = p_expected
        RETURNING version, last_seq, base_bytes, journal_bytes, status
        INTO v_made, v_seq, v_base, v_journal, v_status;
    END IF;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    INSERT INTO zuke_run_deltas (ns, run_id, seq, delta, write_key, made)
    VALUES (p_ns, p_id, v_seq, p_delta, p_key, v_made);
    IF p_signal THEN
        PERFORM zuke_notify(p_ns, p_id, v_status);
    END IF;
    RETURN CASE WHEN v_journal > GREATEST(v_base, p_compact) THEN -v_made ELSE v_made END;
END
$zuke$""",
    ),
    # A run's creation and compactions (see the module docstring): the target names' foreign
    # key dropped (delete removes them itself); the record compressed with lz4 where the
    # server has it (an older or lz4-less server keeps pglz: an optimisation, not a need).
    5: (
        """
DO $zuke$
DECLARE
    fk record;
BEGIN
    FOR fk IN SELECT conrelid::regclass AS tab, conname FROM pg_constraint
              WHERE contype = 'f' AND conrelid = 'zuke_run_targets'::regclass
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tab, fk.conname);
    END LOOP;
END
$zuke$""",
        """
DO $zuke$
BEGIN
    EXECUTE 'ALTER TABLE zuke_runs ALTER COLUMN record SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    NULL;
END
$zuke$""",
    ),
}


def _statements(step: str | tuple[str, ...]) -> list[str]:
    return list(step) if isinstance(step, tuple) else list(filter(str.strip, step.split(";")))


def schema_version(conn: Conn) -> int:
    """The version the database is at (0: no zuke schema yet)."""
    from psycopg2.errors import UndefinedTable

    try:  # one round trip (autocommit: a refusal leaves nothing to roll back)
        row = conn.execute("SELECT max(version) FROM zuke_schema_version").fetchone()
    except UndefinedTable:
        return 0
    return int(row[0]) if row is not None and row[0] is not None else 0


def prepare(conn: Conn, where: str) -> None:
    """Bring the database to :data:`SCHEMA_VERSION` (once, under a lock); refuse a newer one."""
    version = schema_version(conn)
    if version == SCHEMA_VERSION:
        return
    _refuse_newer(version, where)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        conn.execute(_VERSION_TABLE)
        row = conn.execute("SELECT max(version) FROM zuke_schema_version").fetchone()
        version = int(row[0]) if row is not None and row[0] is not None else 0
        _refuse_newer(version, where)
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _statements(MIGRATIONS[step]):
                conn.execute(statement.encode())
            conn.execute("INSERT INTO zuke_schema_version (version) VALUES (%s)", (step,))


def _refuse_newer(version: int, where: str) -> None:
    if version > SCHEMA_VERSION:
        raise StateError(
            f"state: the Postgres database {where} was written by a newer zuke "
            f"(schema {version}, this zuke knows {SCHEMA_VERSION}); upgrade zuke"
        )


# ------------------------------------------------------------------ text values

#: Postgres ``text`` holds neither NUL nor a lone surrogate (``"\ud800"``, which a JSON
#: string may carry). Such a character is kept as this private-use character and a code;
#: the character itself as itself and ``0``. Every other string is stored as it is.
_ESCAPE = "\uf8ff"
_SURROGATES = 0xF0000  # a lone surrogate U+D8xx..U+DFxx becomes U+F00xx..U+F07xx after it


def to_db(value: str) -> str:
    """``value`` as a Postgres ``text`` can hold it (itself, for every ordinary string)."""
    if "\x00" not in value and _ESCAPE not in value:
        try:
            value.encode()
        except UnicodeEncodeError:
            pass
        else:
            return value
    out: list[str] = []
    for ch in value:
        if ch == _ESCAPE:
            out.append(_ESCAPE + "0")
        elif ch == "\x00":
            out.append(_ESCAPE + "1")
        elif "\ud800" <= ch <= "\udfff":
            out.append(_ESCAPE + chr(_SURROGATES + ord(ch) - 0xD800))
        else:
            out.append(ch)
    return "".join(out)


def from_db(value: str) -> str:
    """The string :func:`to_db` stored."""
    if _ESCAPE not in value:
        return value
    out: list[str] = []
    chars = iter(value)
    for ch in chars:
        if ch != _ESCAPE:
            out.append(ch)
            continue
        code = next(chars, "0")
        out.append(
            _ESCAPE
            if code == "0"
            else "\x00"
            if code == "1"
            else chr(ord(code) - _SURROGATES + 0xD800)
        )
    return "".join(out)


__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WAKE_CHANNEL",
    "from_db",
    "prepare",
    "schema_version",
    "to_db",
]
