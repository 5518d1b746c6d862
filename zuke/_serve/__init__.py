"""``zuke serve``: the HTTP state service, standard library only.

Serves the published Zuke state HTTP API (``docs/state-api.md``) from one
SQLite file, so runs of this implementation and of the TypeScript Zuke can
share state. Where things live:

- :mod:`zuke._serve.server` — sockets, auth gate, body limits, logging,
  graceful shutdown; :class:`StateServer` (background thread) and
  :func:`serve` (foreground, until SIGTERM/SIGINT).
- :mod:`zuke._serve.app` — what each request means: routing, namespaces,
  validation, the answers.
- :mod:`zuke._serve.db` — the SQLite schema and every statement.
- :mod:`zuke._serve.__main__` — ``python -m zuke._serve`` / ``main(argv)``.
"""

from zuke._serve.server import DEFAULT_MAX_BODY_BYTES, TOKEN_ENV, StateServer, serve

__all__ = ["DEFAULT_MAX_BODY_BYTES", "TOKEN_ENV", "StateServer", "serve"]
