"""The Postgres store's connections: the URL, the pool, and errors that never show a password.

A ``postgresql://`` (or ``postgres://``) URL is handed to libpq as it is, so
every libpq parameter (``sslmode``, ``sslrootcert``, ``options``, ``target_session_attrs``
…) and the ``PG*`` environment variables work; zuke adds ``connect_timeout``
and ``application_name`` only when the URL does not set them.

Messages name the database as ``postgresql://USER@HOST:PORT/DB``, never with
its password, and every error text from libpq is scrubbed of the password
(however the URL spelled it) before it is shown, on one line.

Connections come from a ``psycopg_pool`` pool in autocommit mode: the store's
statements are single statements or explicit short transactions, and no
session state (no advisory lock, no ``SET``) outlives one, so the store works
behind a transaction pooler (PgBouncer) too. The first connection is made
directly, to say why it failed (a refused connection, a bad password) rather
than the pool's "timed out", and to migrate the schema.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, urlsplit

from zuke._errors import StateError, StoreUnavailableError

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

    Conn = psycopg.Connection[tuple[Any, ...]]

CONNECT_TIMEOUT_S = 10
POOL_TIMEOUT_S = 30.0
DEFAULT_MAX_CONNECTIONS = 10
CHECK = (
    "check that the server is up and reachable, and the user, password and database in ZUKE_STATE"
)


def _secrets_of(url: str) -> list[str]:
    """Every spelling of the URL's password(s), to scrub from messages."""
    found: list[str] = []
    try:
        parts = urlsplit(url)
        raw = parts.netloc.rpartition("@")[0].partition(":")[2] if "@" in parts.netloc else ""
        found += [raw, unquote(raw)]
        found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k == "password"]
        found += re.findall(r"password=([^&\s]+)", url)
    except ValueError:
        pass
    return sorted({s for s in found if s}, key=len, reverse=True)


def shown_url(url: str) -> str:
    """``postgresql://USER@HOST:PORT/DB``, from what the URL says (no password, no query)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
        user = f"{unquote(parts.username)}@" if parts.username else ""
    except ValueError:
        return "postgresql://(a URL that does not parse)"
    return f"postgresql://{user}{host}{port}{parts.path}"


class PgDatabase:
    """One Postgres database: a pool opened on first use, the schema migrated then."""

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        pool_timeout_s: float = POOL_TIMEOUT_S,
        setting: str = "ZUKE_STATE",
    ) -> None:
        self.shown = shown_url(url)
        #: where the URL came from, for messages (``zuke serve`` says ``--db``)
        self.setting = setting
        self._secrets = _secrets_of(url)
        self._url = url
        self._max = max_connections
        self._pool_timeout_s = pool_timeout_s
        self._pool: ConnectionPool[Conn] | None = None
        self._finalizer: weakref.finalize[[], PgDatabase] | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"PgDatabase({self.shown})"

    @property
    def _check(self) -> str:
        return CHECK.replace("ZUKE_STATE", self.setting)

    def scrub(self, text: str) -> str:
        """``text`` on one line, without the password."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return "; ".join(line.strip() for line in text.splitlines() if line.strip())

    def _conninfo(self) -> str:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        try:
            given = conninfo_to_dict(self._url)
        except Exception as exc:  # psycopg.ProgrammingError: libpq could not parse it
            raise StateError(
                f"state: {self.setting} is not a Postgres URL libpq accepts "
                f"({self.scrub(str(exc))})"
            ) from None
        extra: dict[str, str | int] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": "zuke",
        }
        return make_conninfo(self._url, **{k: v for k, v in extra.items() if k not in given})

    def _open(self) -> ConnectionPool[Conn]:
        with self._lock:
            if self._closed:
                raise StoreUnavailableError(f"state: the Postgres store {self.shown} is closed")
            if self._pool is not None:
                return self._pool
            import psycopg
            from psycopg_pool import ConnectionPool

            from zuke.state._pg_schema import prepare

            conninfo = self._conninfo()
            try:
                with psycopg.connect(conninfo, autocommit=True) as first:
                    prepare(first, self.shown)
            except psycopg.Error as exc:
                raise StoreUnavailableError(
                    f"state: cannot use Postgres at {self.shown}: {self.scrub(str(exc))}; "
                    f"{self._check}"
                ) from None
            # psycopg_pool logs reconnections as warnings; keep them off a bare stderr.
            logging.getLogger("psycopg").addHandler(logging.NullHandler())
            self._pool = ConnectionPool(
                conninfo,
                kwargs={"autocommit": True},
                min_size=1,
                max_size=max(1, self._max),
                timeout=self._pool_timeout_s,
                name="zuke-state",
                open=True,
            )
            # Closed when this object goes (a command that never calls close()) or at exit,
            # from this side: left to itself, the pool may be collected on one of its own
            # worker threads, whose __del__ then fails to join that very thread.
            self._finalizer = weakref.finalize(self, self._pool.close)
            return self._pool

    @contextmanager
    def connection(self) -> Iterator[Conn]:
        """A pooled autocommit connection; psycopg's errors become one redacted ``zuke:`` line."""
        import psycopg
        from psycopg_pool import PoolTimeout

        pool = self._open()
        try:
            with pool.connection() as conn:
                yield conn
        except PoolTimeout:
            raise StoreUnavailableError(
                f"state: no connection to Postgres at {self.shown} within "
                f"{self._pool_timeout_s:g}s ({self._max} in use, or the server stopped "
                f"answering); {self._check}, or allow more connections"
            ) from None
        except psycopg.Error as exc:
            raise StoreUnavailableError(
                f"state: Postgres at {self.shown} failed: {self.scrub(str(exc))}"
            ) from None

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._pool, finalizer = None, self._finalizer
        if finalizer is not None:
            finalizer()


__all__ = ["PgDatabase", "shown_url"]
