"""``zuke serve``: the HTTP state service, on uvicorn.

Serves the published Zuke state HTTP API (``docs/state-api.md``) — runs,
locks and the build catalog — from one SQLite file, or from a Postgres
database that any number of replicas share (``--db postgresql://…``), so runs
of this implementation and of the TypeScript Zuke can share state. Where
things live:

- :mod:`zuke._serve.server` — lifecycle: :class:`StateServer` (background
  thread), :func:`serve` (foreground, until SIGTERM/SIGINT), the limits.
- :mod:`zuke._serve.protocol` — uvicorn's httptools protocol plus the
  request head's deadline and size bound, and one-line logging.
- :mod:`zuke._serve.asgi` — auth gate, body limits and deadline, the log line;
  which requests the event loop answers itself and which go to a worker.
- :mod:`zuke._serve.app` — what each request means: routing, namespaces,
  runs and locks; :mod:`zuke._serve.builds` the build catalog;
  :mod:`zuke._serve.answers` the shared request/response vocabulary.
- :mod:`zuke._serve.backend` — what the app asks of a database
  (:class:`~zuke._serve.backend.ServeDb`); :func:`zuke._serve.db_choice.open_db`
  picks one from ``--db``.
- :mod:`zuke._serve.db` (runs), :mod:`zuke._serve.db_locks`,
  :mod:`zuke._serve.db_builds`, :mod:`zuke._serve.schema`,
  :mod:`zuke._serve.sqlite` — the SQLite side (``sqlite``: transactions, and
  the prompt writes the event loop may take).
- :mod:`zuke._serve.pg` — the Postgres side, on the direct store's SQL.
- :mod:`zuke._serve.jsontext` — strict JSON in, always-encodable JSON out.
- :mod:`zuke._serve.__main__` — ``python -m zuke._serve`` / ``main(argv)``.
- :mod:`zuke._serve.ui` — the read-only web view at ``/ui/`` (``--no-ui`` turns it off),
  mounted by :mod:`zuke._serve.asgi` ahead of the bearer-token gate.
"""

from zuke._serve.server import (
    DEFAULT_MAX_BODY_BYTES,
    TOKEN_ENV,
    ServeLimits,
    StateServer,
    serve,
)

__all__ = ["DEFAULT_MAX_BODY_BYTES", "TOKEN_ENV", "ServeLimits", "StateServer", "serve"]
