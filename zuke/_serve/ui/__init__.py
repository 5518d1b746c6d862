"""``zuke serve``'s web view at ``/ui/``: runs, a run, locks, live; read-only, self-contained.

Where things live:

- :mod:`.routes` — :class:`~.routes.UiApp`, the ASGI application of ``/ui``:
  what each request means, the session gate, the login form.
- :mod:`.auth` — tokens, the session cookie (an HMAC, never the token), the
  login form's anti-forgery checks.
- :mod:`.http` — reading a request, answering with the safety headers (CSP).
- :mod:`.pages` — each page as a template and its values; :mod:`.queries`
  (the runs page: filters, keyset paging, where each run is at),
  :mod:`.run_view` and :mod:`.gate_view` (a run's page), :mod:`.locks_view`.
- :mod:`.graph` — the run's graph laid out for SVG (layers, wrapping,
  fan-outs grouped).
- :mod:`.render` — the Jinja templates (escaped, with control and bidi
  characters made visible) and the static files (``templates/``, ``static/``).
- :mod:`.live` — server-sent events: feeds shared by the pages that follow
  one view, woken by polling and, on Postgres, by ``LISTEN``.

Nothing here imports jinja2 until :mod:`.routes` is loaded, which
:mod:`zuke._serve.server` does only when the view is on.
"""
