"""Which database ``zuke serve --db`` names, and opening it: a SQLite file or Postgres.

Apart from :mod:`zuke._serve.server` (the service's lifecycle: socket, uvicorn, signals)
because what ``--db`` means is decided before anything starts, and the web view's tests
and the server open a database the same way. Postgres's driver is imported only when a
``postgresql://`` URL asks for it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from zuke._clock import Clock
from zuke._errors import UsageError
from zuke._serve.backend import ServeDb, is_postgres
from zuke._serve.db import StateDb

#: Worker threads (and pooled connections) on Postgres, whose calls wait on the network,
#: unless ``ZUKE_PG_POOL_SIZE`` says otherwise.
PG_WORKERS = 16


def pg_connections(env: Mapping[str, str]) -> int:
    """Connections (and worker threads) of a replica: ``ZUKE_PG_POOL_SIZE``, else 16."""
    from zuke.state._pg_conn import POOL_SIZE_ENV
    from zuke.state.postgres import pool_size

    return pool_size(env) if env.get(POOL_SIZE_ENV, "").strip() else PG_WORKERS


def check_db(spec: str | os.PathLike[str]) -> str | Path:
    """``--db`` as :func:`open_db` takes it: a Postgres URL (a string), else a file's path.

    Any other ``scheme://`` is a :class:`UsageError`: it is no file name anyone meant
    (and as a path, ``//`` would fold into a directory named after the scheme).
    """
    if is_postgres(spec):
        return str(spec)
    text = os.fspath(spec)
    if "://" in text:
        scheme = "".join(c if c.isprintable() else "?" for c in text.split("://", 1)[0][:20])
        raise UsageError(f"--db {scheme}://… is neither a SQLite file nor a postgresql:// URL")
    return Path(text)


def open_db(spec: str | Path, *, clock: Clock, wait_s: float, connections: int) -> ServeDb:
    """The database :func:`check_db` accepted: Postgres for a URL, else a SQLite file.

    On Postgres, up to ``connections``, and a request waits at most ``wait_s`` for one.
    """
    if isinstance(spec, str):
        from zuke._serve.pg import PgServeDb  # psycopg2 only when Postgres is asked for

        return PgServeDb(spec, connections=connections, wait_s=wait_s)
    return StateDb(spec, clock=clock)


__all__ = ["PG_WORKERS", "check_db", "open_db", "pg_connections"]
