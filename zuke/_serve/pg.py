"""``zuke serve --db postgresql://…``: the state API's runs, locks and builds in Postgres.

The SQL is the direct store's (:mod:`zuke.state._pg_runs`, ``_pg_locks``,
``_pg_builds``, the same tables and schema): a namespace of the URL is the
tables' ``ns`` column, so ``http://replica/`` and ``ZUKE_STATE=postgresql://…``
see the same runs. A version is the row's sequence number, sent as a quoted
ETag (``"42"``). Records and descriptors are stored as sent.

Replicas share nothing but the database. Each call is one statement (or one
short transaction) on a pooled autocommit connection, decided by Postgres'
row locks and clock (``clock_timestamp()``); the answer is sent only after
the commit, so a replica killed at any point loses no acknowledged write.
Calls go through :meth:`PgDatabase.call`, as the direct store's do: a
connection that broke (a database restart) is replaced, and a write whose
answer was lost is looked up by the version (or lock token) drawn before it
was sent, so it is never applied twice.
The only thing kept in memory is which namespaces already have their fence
floor row — a fact that, once true, stays true (the row is never deleted).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import TYPE_CHECKING, Literal

from zuke._clock import iso
from zuke._errors import StateError
from zuke._serve.backend import (
    BuildOutcome,
    Descriptor,
    Position,
    StoredText,
    SummaryRow,
    WriteOutcome,
    grant_token,
)
from zuke._serve.jsontext import dumps
from zuke._serve.sqlite import WouldWait
from zuke.state import _pg_builds, _pg_driver, _pg_locks, _pg_runs
from zuke.state._listing_sql import Position as Place
from zuke.state._listing_sql import page
from zuke.state._pg_conn import PgDatabase
from zuke.state._protocol import Conflict, LockAcquired, LockEntry, LockHeld, RunQuery, Written
from zuke.state.records import LockHolder, RunDelta, RunRecord, RunStatus, RunSummary

if TYPE_CHECKING:
    from zuke.state._pg_conn import Conn
    from zuke.state._pg_listen import Listener

#: a compare-and-swap write: ``(conn, expected version, new version, witness key)``
_Write = Callable[["Conn", int, int, str], "Written | Conflict"]
#: namespaces whose fence floor is remembered; past it the memory starts over (it is a cache)
_FLOORS_KEPT = 10_000


def etag(version: int) -> str:
    return f'"{version}"'


def version_of(tag: str) -> int | Literal["*"] | None:
    """The version an ``If-Match`` names: ``*``, ours (``"42"``), or ``None`` (matches nothing)."""
    tag = tag.strip()
    if tag == "*":
        return "*"
    if len(tag) >= 2 and tag[0] == tag[-1] == '"':
        tag = tag[1:-1]
    return _pg_runs.parse_version(tag)


class _Floors:
    """Which namespaces have their fence-floor row (a row, once there, is never deleted)."""

    def __init__(self) -> None:
        self._known: set[str] = set()
        self._lock = threading.Lock()

    def ensure(self, conn: Conn, ns: str) -> None:
        if ns in self._known:
            return
        _pg_locks.ensure_floor(conn, ns)
        with self._lock:
            if len(self._known) >= _FLOORS_KEPT:
                self._known.clear()
            self._known.add(ns)


class PgServeDb:
    """The :class:`~zuke._serve.backend.ServeDb` of a Postgres database."""

    def __init__(self, url: str, *, connections: int, wait_s: float) -> None:
        """``wait_s``: the longest a request waits for a connection (then 503)."""
        try:
            _pg_driver.load()  # without Python's ssl: libpq has its own TLS
        except ImportError:
            raise StateError(
                "--db names a Postgres database, but psycopg is not installed: "
                "pip install 'zuke[postgres]'"
            ) from None
        self._closed = False
        self._db = PgDatabase(
            url, max_connections=connections, pool_timeout_s=wait_s, setting="--db"
        )
        self.shown = self._db.shown
        floors = _Floors()
        self.locks = PgLocks(self._db, floors)
        self.builds = PgBuilds(self._db)
        self._floors = floors
        with self._db.connection():  # connect and migrate now: a bad --db fails at start
            pass

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True
        self._db.close()

    def promptly(self) -> AbstractContextManager[None]:
        """Never on the event loop: every call waits on the network."""
        return _NeverPromptly()

    def listen(self, ns: str, wake: Callable[[str, str | None], None]) -> Listener:
        """Call ``wake`` when a run of ``ns`` parks or is signalled: the ``LISTEN`` a
        watching sweeper wakes on (:mod:`zuke.state._pg_listen`); the caller closes it."""
        from zuke.state._pg_listen import listen

        return listen(self._db, ns, wake)

    def get_run(self, ns: str, run_id: str) -> StoredText | None:
        found = self._db.call(lambda conn: _pg_runs.get_text(conn, ns, run_id))
        return None if found is None else StoredText(text=found[0], etag=etag(found[1]))

    def create_run(
        self, ns: str, record: RunRecord, text: str, *, write_id: str | None = None
    ) -> str | None:
        version = self._db.version()  # drawn first: a lost answer is looked up by it
        key = _key(write_id, version)

        def create(conn: Conn) -> Written | Conflict:
            made = _pg_runs.create(conn, ns, record, text, version=version, key=key)
            if isinstance(made, Written):
                return made
            return _landed(conn, ns, record.id, key, None) or Conflict()  # ours, sent before?

        def landed(conn: Conn) -> Written | Conflict | None:
            return _landed(conn, ns, record.id, key, None)

        written = self._db.call(create, landed=landed)
        return etag(int(written.version)) if isinstance(written, Written) else None

    def update_run(
        self, ns: str, record: RunRecord, text: str, *, if_match: str, write_id: str | None = None
    ) -> tuple[WriteOutcome, str]:
        def put(conn: Conn, expected: int, version: int, key: str) -> Written | Conflict:
            return _pg_runs.put(conn, ns, record, expected, text, version=version, key=key)

        return self._write(ns, record.id, version_of(if_match), put, write_id)

    def patch_run(
        self, ns: str, run_id: str, delta: RunDelta, *, if_match: str, write_id: str | None = None
    ) -> tuple[WriteOutcome, str]:
        def append(conn: Conn, expected: int, version: int, key: str) -> Written | Conflict:
            return _pg_runs.append(conn, ns, run_id, delta, expected, version=version, key=key)

        return self._write(ns, run_id, version_of(if_match), append, write_id)

    def _write(
        self,
        ns: str,
        run_id: str,
        expected: int | Literal["*"] | None,
        write: _Write,
        write_id: str | None,
    ) -> tuple[WriteOutcome, str]:
        """A compare-and-swap at ``expected`` (``*``: whatever the version is now); a write
        keyed ``write_id`` that landed before (its answer lost) is answered as it landed."""
        while expected is not None:
            if expected == "*":  # the current version, unless it moves meanwhile (then again)
                at = self._db.call(lambda conn: _pg_runs.version_of(conn, ns, run_id))
                if at is None:
                    return "missing", ""
            else:
                at = expected
            version = self._cas(write, ns, run_id, at, write_id)
            if version is not None:
                return "written", etag(version)
            if expected != "*":
                break
        if write_id is not None:
            key = _key(write_id, 0)
            made, now = self._db.call(lambda conn: _pg_runs.witnessed(conn, ns, run_id, key))
        else:
            made, now = None, self._db.call(lambda conn: _pg_runs.version_of(conn, ns, run_id))
        if made is not None:
            return "written", etag(made)
        return ("missing" if now is None else "mismatch"), ""

    def _cas(
        self, write: _Write, ns: str, run_id: str, expected: int, write_id: str | None
    ) -> int | None:
        """One write at ``expected``; the new version, or ``None`` if it did not land."""
        version = self._db.version()  # drawn first: a lost answer is looked up by it
        key = _key(write_id, version)
        written = self._db.call(
            lambda conn: write(conn, expected, version, key),
            landed=lambda conn: _landed(conn, ns, run_id, key, expected),
        )
        return int(written.version) if isinstance(written, Written) else None

    def delete_run(self, ns: str, run_id: str) -> bool:
        """Remove a run and forget its lease row unless live (the fence is kept in the floor)."""

        def delete(conn: Conn) -> bool:
            self._floors.ensure(conn, ns)
            with conn.transaction():
                _pg_locks.forget_lease(conn, ns, run_id)
                return _pg_runs.delete(conn, ns, run_id)

        return self._db.call(delete)  # sent again after a lost answer: 404, which is "done"

    def list_runs(
        self,
        ns: str,
        *,
        status: str | None = None,
        target: str | None = None,
        build: str | None = None,
        since_ms: int | None = None,
        limit: int | None = None,
        before: Position | None = None,
    ) -> list[SummaryRow]:
        query = RunQuery(
            status=_status(status), target=target, build=build,
            since=None if since_ms is None else iso(since_ms), limit=limit,
        )  # fmt: skip

        def fetch(limit: int | None, before: Place | None) -> list[RunSummary]:
            asked = replace(query, limit=limit)
            return self._db.call(lambda conn: _pg_runs.listing(conn, ns, asked, before=before))

        rows = page(fetch, limit=limit, before=before)
        return [
            (r.id, r.build, r.root_target, r.status, r.actor, r.created_at, r.updated_at)
            for r in rows
        ]


class PgLocks:
    """Lease rows with fences (``_pg_locks``): the database's clock decides every expiry."""

    def __init__(self, db: PgDatabase, floors: _Floors) -> None:
        self._db = db
        self._floors = floors

    def acquire(
        self, ns: str, key: str, holder: LockHolder, ttl_ms: int, *, write_id: str | None = None
    ) -> LockAcquired | LockHeld:
        # chosen first: a lost answer is looked up by it (its grant); derived from the
        # request's idempotency key, so that the request sent again finds it too
        token = uuid.uuid4().hex if write_id is None else grant_token(write_id)

        def acquire(conn: Conn) -> LockAcquired | LockHeld:
            if write_id is not None:  # the request sent again: did it land before?
                granted = _pg_locks.held_by(conn, ns, key, token)
                if granted is not None:
                    return granted  # whatever happened to the claim since
            self._floors.ensure(conn, ns)
            return _pg_locks.acquire(conn, ns, key, holder, ttl_ms, token=token)

        return self._db.call(acquire, landed=lambda c: _pg_locks.held_by(c, ns, key, token))

    def renew(self, ns: str, key: str, token: str, ttl_ms: int) -> bool | None:
        def renew(conn: Conn) -> bool | None:
            if _pg_locks.renew(conn, ns, key, token, ttl_ms):
                return True
            claimed = conn.execute(
                "SELECT 1 FROM zuke_locks WHERE ns = %s AND key = %s AND token_sha256 IS NOT NULL",
                (ns, key),
            ).fetchone()
            return False if claimed is not None else None

        return self._db.call(renew)  # twice is once: the TTL counts from the last

    def release(self, ns: str, key: str, token: str) -> bool:
        # Sent again after a lost answer: 404, which a client takes as done.
        return self._db.call(lambda conn: _pg_locks.release(conn, ns, key, token))

    def break_claim(self, ns: str, key: str) -> LockHolder | None:
        # Sent again after a lost answer, it would say "not held" of a claim it broke.
        return self._db.call(lambda conn: _pg_locks.break_claim(conn, ns, key), resend=False)

    def list(self, ns: str, *, run_id: str | None = None) -> list[LockEntry]:
        return self._db.call(lambda conn: _pg_locks.listing(conn, ns, run_id))


class PgBuilds:
    """The build catalog in ``zuke_builds`` (:mod:`zuke.state._pg_builds`)."""

    def __init__(self, db: PgDatabase) -> None:
        self._db = db

    def get(self, ns: str, build_id: str) -> tuple[str, str] | None:
        found = self._db.call(lambda conn: _pg_builds.get(conn, ns, build_id))
        return None if found is None else (found[0], etag(found[1]))

    def put(self, ns: str, build: Descriptor, *, if_match: str | None) -> tuple[BuildOutcome, str]:
        expected = None if if_match is None else version_of(if_match)
        if if_match is not None and expected is None:
            found = self._db.call(lambda conn: _pg_builds.get(conn, ns, build.id))
            return ("mismatch" if found is not None else "missing"), ""
        # Sent again after a lost answer it is a 412 (it landed): the client re-reads, as
        # after any conflict, and registering is idempotent.
        outcome, version = self._db.call(
            lambda conn: _pg_builds.put(
                conn,
                ns,
                build.id,
                text_for=lambda created_at: dumps(build.with_created_at(created_at)),
                name=build.name,
                actor=build.actor,
                created_at=build.created_at,
                created_ms=build.created_ms,
                updated_at=build.updated_at,
                if_match=expected,
            )
        )
        return outcome, etag(version) if outcome == "written" else ""

    def delete(self, ns: str, build_id: str) -> bool:
        return self._db.call(lambda conn: _pg_builds.delete(conn, ns, build_id))

    def list(self, ns: str, *, name: str | None, since_ms: int | None) -> list[dict[str, str]]:
        return self._db.call(
            lambda conn: _pg_builds.listing(conn, ns, name=name, since_ms=since_ms)
        )


class _NeverPromptly:
    def __enter__(self) -> None:
        raise WouldWait

    def __exit__(self, *exc: object) -> None:
        return None


def _key(write_id: str | None, version: int) -> str:
    """A write's witness key: the client's idempotency key, else the version drawn for it."""
    return _pg_runs.write_key(version) if write_id is None else f"k:{write_id}"


def _landed(
    conn: Conn, ns: str, run_id: str, key: str, expected: int | None
) -> Written | Conflict | None:
    """After a lost answer (or a refusal of a keyed write): landed (its witness, whatever
    landed after it), not yet (still at ``expected``; ``None``: a create and no run), or
    never (another writer moved the run on)."""
    made, now = _pg_runs.witnessed(conn, ns, run_id, key)
    if made is not None:
        return Written(version=str(made))
    return None if now == expected else Conflict()


def _status(status: str | None) -> RunStatus | None:
    return status  # type: ignore[return-value]  # checked against RUN_STATUSES by the app


__all__ = ["PgBuilds", "PgLocks", "PgServeDb", "etag", "version_of"]
