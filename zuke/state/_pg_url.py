"""A Postgres store's address: its URL as libpq takes it, as messages show it, and advice.

Apart from the connections (:mod:`._pg_conn`) because what a URL means and how it is shown
is one rule shared by the store, ``zuke serve --db`` and the listener, and holds no socket.

A ``postgresql://`` (or ``postgres://``) URL is handed to libpq as it is, so
every libpq parameter (``sslmode``, ``sslrootcert``, ``options``, ``target_session_attrs``
…) and the ``PG*`` environment variables work; zuke adds ``connect_timeout``
and ``application_name`` only when neither the URL nor libpq's variable for it
(``PGCONNECT_TIMEOUT``, ``PGAPPNAME``) sets them. The client encoding is always
UTF8 (``PGCLIENTENCODING`` or a URL's ``client_encoding`` would make psycopg2 decode the
store's text with another codec); the server converts to the database's own encoding.

Messages name the database as ``postgresql://USER@HOST:PORT/DB``, never with
its password, and every error text from libpq is scrubbed of the password
(however the URL spelled it) before it is shown, on one line. A refusal names what to
check (the password, the database, ``max_connections`` and the pool's size, …).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from urllib.parse import parse_qsl, unquote, urlsplit

from zuke._errors import StateError

CONNECT_TIMEOUT_S = 10
#: libpq's environment variables for the parameters zuke adds: set, they are the user's
#: choice, which zuke's default in the URL would override (libpq-envars)
_ENV = {"connect_timeout": "PGCONNECT_TIMEOUT", "application_name": "PGAPPNAME"}
CHECK = (
    "check that the server is up and reachable, and the user, password and database in ZUKE_STATE"
)

#: (what libpq said, what to check) — the first that matches a refusal names its advice
_ADVICE: tuple[tuple[str, str], ...] = (
    ("password authentication failed", "check the user and password in {setting} (or "
     "PGPASSWORD, ~/.pgpass)"),
    ("no password supplied", "give the password in {setting} (or PGPASSWORD, ~/.pgpass)"),
    ("does not exist", "check the user and database names in {setting}, or create the database"),
    ("too many clients", "the server's max_connections is reached: lower {pool} (now {size}) "
     "in each zuke process, or raise max_connections on the server"),
    ("remaining connection slots", "the server's max_connections is reached: lower {pool} "
     "(now {size}) in each zuke process, or raise max_connections on the server"),
    ("starting up", "the server is starting: retry in a moment"),
    ("shutting down", "the server is shutting down: check why, and start it"),
    ("recovery", "the server is recovering: retry in a moment"),
    ("connection refused", "check that the server is up and listening at {where} "
     "(pg_isready -h {host} -p {port}), and the host and port in {setting}"),
    ("timeout expired", "check that the server is up and reachable from here at {where} (a "
     "firewall?), and the host and port in {setting}"),
)  # fmt: skip


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


class PgAddress:
    """One database's URL: how libpq gets it, how messages show it, what a refusal advises."""

    def __init__(self, url: str, *, setting: str, pool_setting: str, size: int) -> None:
        self.shown = shown_url(url)
        #: where the URL came from, for messages (``zuke serve`` says ``--db``)
        self.setting = setting
        #: what sizes the pool, for messages
        self.pool_setting = pool_setting
        self._secrets = _secrets_of(url)
        self._url = url
        self._max = size

    @property
    def _check(self) -> str:
        return CHECK.replace("ZUKE_STATE", self.setting)

    def advice(self, said: str) -> str:
        """What to check after the server (or libpq) said ``said``."""
        lowered = said.lower()
        try:
            parts = urlsplit(self._url)
            host, port = parts.hostname or "localhost", str(parts.port or 5432)
        except ValueError:
            host, port = "HOST", "PORT"
        for clue, advice in _ADVICE:
            if clue in lowered:
                return advice.format(
                    setting=self.setting, pool=self.pool_setting, size=self._max,
                    where=f"{host}:{port}", host=host, port=port,
                )  # fmt: skip
        return self._check

    def scrub(self, text: str) -> str:
        """``text`` on one line, without the password."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return "; ".join(line.strip() for line in text.splitlines() if line.strip())

    def conninfo(self, defaults: Mapping[str, str | int] | None = None, **extra: str | int) -> str:
        """The URL as libpq takes it: zuke's defaults (and ``defaults``) where the URL sets
        none, the client encoding UTF8 whatever it or ``PGCLIENTENCODING`` says, and ``extra``
        over all."""
        from zuke.state import _pg_driver

        _pg_driver.load()  # the first use of psycopg2 in most commands: without Python's ssl
        from psycopg2.extensions import make_dsn, parse_dsn

        try:
            given = parse_dsn(self._url)
        except Exception as exc:  # psycopg2.ProgrammingError: libpq could not parse it
            raise StateError(
                f"state: {self.setting} is not a Postgres URL libpq accepts "
                f"({self.scrub(str(exc))})"
            ) from None
        wanted: dict[str, str | int] = {
            "connect_timeout": CONNECT_TIMEOUT_S,
            "application_name": "zuke",
            **(defaults or {}),
        }
        # libpq's own environment variable is the user's too: the URL would override it
        chosen = {
            k: v
            for k, v in wanted.items()
            if k not in given and not os.environ.get(_ENV.get(k, ""))
        }
        return make_dsn(self._url, **{**chosen, "client_encoding": "UTF8", **extra})


__all__ = ["CHECK", "CONNECT_TIMEOUT_S", "PgAddress", "shown_url"]
