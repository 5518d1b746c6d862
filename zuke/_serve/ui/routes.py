"""The web view's routes: what each ``/ui/…`` request means, and who may have it.

``/ui/`` runs, ``/ui/runs/<id>`` a run, ``/ui/locks`` locks, ``/ui/events``
their live feed, ``/ui/login`` and ``/ui/logout``, ``/ui/static/…`` the
stylesheet, script and icon (the only thing served without a session: they
hold nothing of the state). The view is read-only: it has no route that
writes, and the state API never takes its cookie.

Pages are computed on the worker threads (the database blocks) and the live
region is rendered once, then put into its page, so its digest is the
digest of what the page shows.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from markupsafe import Markup

from zuke._clock import Clock
from zuke._errors import StoreUnavailableError
from zuke._serve.asgi import LineLog, shown_path
from zuke._serve.backend import ServeDb
from zuke._serve.ui import auth, pages
from zuke._serve.ui.http import (
    SAFETY_HEADERS,
    Receive,
    Scope,
    Send,
    UiRequest,
    UiResponse,
    html,
    plain,
    read_form,
    redirect,
    request_of,
    send_response,
)
from zuke._serve.ui.live import ListenFn, LiveHub, LiveSettings, Snapshot, digest_of
from zuke._serve.ui.queries import BadQuery, namespace
from zuke._serve.ui.render import Asset, Renderer, load_assets, url

#: threads that read and render the view's pages (the state API has its own)
WORKERS = 2


def _safe_next(value: str) -> str:
    """Where a login returns to: a path of the view, never another site."""
    ok = value.startswith("/ui/") and not value.startswith("//") and value.isprintable()
    return value if ok and "\\" not in value and len(value) < 2000 else "/ui/"


class UiApp:
    """The ASGI application of ``/ui``; :class:`~zuke._serve.asgi.StateAsgi` hands it those
    requests before its bearer-token gate."""

    def __init__(
        self, db: ServeDb, *, token: str | None, read_token: str | None, clock: Clock,
        log: LineLog, stopping: Callable[[], bool], request_timeout_s: float,
        live: LiveSettings | None = None,
    ) -> None:  # fmt: skip
        self._db = db
        self._auth = auth.UiAuth(token=token, read_token=read_token, clock=clock)
        # Pages and live feeds read and render on threads of their own: however many pages
        # are open, the state API's workers (what runs write through) are never theirs.
        executor = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="zuke-ui")
        self._executor = executor
        self._clock = clock
        self._log = log
        self._stopping = stopping
        self._timeout_s = request_timeout_s
        self._assets: dict[str, Asset] = load_assets()
        self._renderer = Renderer(self._assets)
        listen: ListenFn | None = getattr(db, "listen", None)  # Postgres: NOTIFY wakes pages
        self.hub = LiveHub(executor=executor, settings=live or LiveSettings(), log=log,
                           listen=listen, stopping=stopping)  # fmt: skip

    def close(self) -> None:
        """After the server stopped: stop listening, then the view's threads."""
        self.hub.close()
        self._executor.shutdown(wait=True, cancel_futures=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = request_of(scope)
        if request.path == "/ui/events" and request.method == "GET":
            await self._events(request, receive, send)
            return
        try:
            response = await self._answer(request, receive)
        except Exception as exc:  # one bad request must not take the service down
            response = self._failed(request, exc)
        await send_response(send, response, close=self._stopping())
        self._log.line(f"{request.method} {shown_path(request.path)} {response.status}")

    async def _answer(self, request: UiRequest, receive: Receive) -> UiResponse:
        path, method = request.path, request.method
        if path.startswith("/ui/static/"):
            return self._static(path)
        if path == "/ui":
            return redirect("/ui/" + (f"?{request.query}" if request.query else ""), status=308)
        if path == "/ui/login":
            if method == "POST":
                return await self._login(request, receive)
            return self._login_form(request, error=None, status=200)
        if path == "/ui/logout" and method == "POST":
            if not auth.same_origin_post(request.headers):
                return plain(403, "zuke serve: a sign-out from another site was refused")
            return redirect("/ui/login", ("Set-Cookie", auth.cleared_session_cookie()))
        session = self._auth.session(request.headers)
        if session is None:
            return self._signed_out(request)
        if method != "GET":
            return plain(405, "zuke serve: the web view only reads (GET)")
        now = self._clock.now_ms()
        find: Callable[[], pages.View]
        if path == "/ui/":
            find = partial(pages.runs, self._db, request.params, now_ms=now)
        elif path == "/ui/locks":
            find = partial(pages.locks, self._db, request.params, now_ms=now)
        elif path.startswith("/ui/runs/") and path.count("/") == 3:
            run_id = path.removeprefix("/ui/runs/")
            find = partial(pages.run, self._db, request.params, run_id, now_ms=now)
        else:
            return self._message(request, 404, "Not found", "There is no such page in this view.")
        loop = asyncio.get_running_loop()
        page = await loop.run_in_executor(self._executor, self._page, find, session, now)
        return html(200, page)

    def _common(self, view_name: str, ns: str, session: auth.Session | None) -> dict[str, Any]:
        return {
            "now_ms": self._clock.now_ms(), "nav": view_name, "ns": ns,
            "signed_in": session.kind if session is not None and self._auth.required else None,
        }  # fmt: skip

    def _page(self, find: Callable[[], pages.View], session: auth.Session, now: int) -> str:
        """The page (on a worker thread): its values, its live region, then the whole."""
        view = find()
        context = {**self._common(view.name, view.context.get("ns", ""), session),
                   **view.context, "title": view.title, "now_ms": now}  # fmt: skip
        region = self._renderer.render(view.live, context)
        live_url = url("/ui/events", view.live_params, view=view.name, ns=context["ns"],
                       have=digest_of(region))  # fmt: skip
        return self._renderer.render(view.page, {**context, "live_url": live_url,
                                                 "live_html": Markup(region)})  # fmt: skip

    # ------------------------------------------------------------------ the live feed

    async def _events(self, request: UiRequest, receive: Receive, send: Send) -> None:
        session = self._auth.session(request.headers)
        refusal = None
        if session is None:
            refusal = plain(401, "zuke serve: sign in to follow this view")
        elif self.hub.full:
            refusal = plain(503, "zuke serve: too many live pages are open; reload later")
        if refusal is not None:
            await send_response(send, refusal, close=True)
            self._log.line(f"GET /ui/events {refusal.status}")
            return
        assert session is not None
        wanted = ("view", "ns", *pages.LIVE_VIEWS.get(request.params.get("view", ""), ()))
        params = {k: v for k, v in request.params.items() if k in wanted}
        key = tuple(f"{k}={v}" for k, v in sorted(params.items()))
        expires = session.issued_ms + auth.SESSION_MS

        def render() -> Snapshot:
            now = self._clock.now_ms()
            try:
                view = pages.for_live(self._db, params, now_ms=now)
            except (BadQuery, pages.NotFound) as exc:
                return Snapshot("", "", gone=str(exc))
            context = {**self._common(view.name, view.context.get("ns", ""), session),
                       **view.context, "title": view.title, "now_ms": now}  # fmt: skip
            region = self._renderer.render(view.live, context)
            return Snapshot(digest_of(region), region)

        self._log.line("GET /ui/events 200")
        have = request.headers.get("last-event-id") or request.params.get("have", "")
        still_valid = (lambda: self._clock.now_ms() < expires) if self._auth.required else (
            lambda: True)  # fmt: skip
        await self.hub.stream(send, receive, key=key, ns=params.get("ns", ""), render=render,
                              have=have, still_valid=still_valid)  # fmt: skip

    # ------------------------------------------------------------------ signing in

    def _signed_out(self, request: UiRequest) -> UiResponse:
        if request.method != "GET":
            return plain(401, "zuke serve: sign in first")
        if request.headers.get("sec-fetch-site", "").lower() == "cross-site":
            # A link from another site: the browser kept our SameSite=Strict cookie back.
            # Our own page navigates again, and that request carries it (if there is one).
            context = {**self._common("", "", None), "title": "Opening",
                       "target": request.target}  # fmt: skip
            return html(200, self._renderer.render("bounce.html", context))
        return redirect(url("/ui/login", next=request.target))

    def _login_form(self, request: UiRequest, *, error: str | None, status: int) -> UiResponse:
        next_path = _safe_next(request.params.get("next", "/ui/"))
        if not self._auth.required or (error is None and self._auth.session(request.headers)):
            return redirect(next_path)
        value = auth.new_form_value()
        context = {**self._common("", "", None), "title": "Sign in", "form_value": value,
                   "next": next_path, "error": error}  # fmt: skip
        return html(
            status,
            self._renderer.render("login.html", context),
            ("Set-Cookie", auth.login_form_cookie(value)),
        )

    async def _login(self, request: UiRequest, receive: Receive) -> UiResponse:
        if not self._auth.required:
            return redirect("/ui/")
        form = await read_form(request.headers, receive, timeout_s=self._timeout_s)
        if form is None:
            return plain(400, "zuke serve: the sign-in form did not arrive whole; try again")
        retry = UiRequest(request.method, request.path, "", {"next": form.get("next", "/ui/")},
                          request.headers)  # fmt: skip
        if not auth.same_origin_post(request.headers):
            return plain(403, "zuke serve: a sign-in posted from another site was refused")
        # A refused sign-in is the form again, with why: answered 200, as a form is (a
        # browser logs any 4xx page as a console error), with no session cookie.
        if not auth.form_value_matches(request.headers, form.get("form", "")):
            return self._login_form(retry, status=200, error="The sign-in form expired or "
                                    "its cookie was not kept; enter the token again.")  # fmt: skip
        kind = self._auth.login(form.get("token", ""))
        if kind is None:
            self._log.line("POST /ui/login: a token that is not accepted")
            return self._login_form(retry, status=200, error="That token is not accepted.")
        cookie = auth.session_cookie(self._auth.session_value(kind),
                                     secure=auth.over_https(request.headers))  # fmt: skip
        return redirect(_safe_next(form.get("next", "/ui/")), ("Set-Cookie", cookie))

    # ------------------------------------------------------------------ the rest

    def _static(self, path: str) -> UiResponse:
        asset = self._assets.get(path)
        if asset is None:
            return plain(404, "zuke serve: no such file")
        kept = ("Cache-Control", "public, max-age=31536000, immutable")  # its name is its hash
        return UiResponse(200, asset.body, (("Content-Type", asset.content_type), kept,
                                            *SAFETY_HEADERS))  # fmt: skip

    def _message(self, request: UiRequest, status: int, title: str, message: str) -> UiResponse:
        try:
            ns = namespace(request.params)
        except BadQuery:
            ns = ""
        context = {**self._common("", ns, self._auth.session(request.headers)),
                   "title": title, "message": message, "status": status}  # fmt: skip
        try:
            return html(status, self._renderer.render("message.html", context))
        except Exception:  # a namespace that will not render: the plain words
            return plain(status, f"zuke serve: {message}")

    def _failed(self, request: UiRequest, exc: Exception) -> UiResponse:
        if isinstance(exc, BadQuery):
            return self._message(request, 400, "Bad request", str(exc))
        if isinstance(exc, pages.NotFound):
            return self._message(request, 404, "Not found", str(exc))
        if isinstance(exc, StoreUnavailableError):
            self._log.line(f"{request.method} {shown_path(request.path)}: {exc}")
            return self._message(request, 503, "Unavailable", "The state database is "
                                 "unavailable; try again shortly.")  # fmt: skip
        self._log.line(f"error {type(exc).__name__} handling {request.method} "
                       f"{shown_path(request.path)}")  # fmt: skip
        return self._message(request, 500, "Internal error", "The view could not show this "
                             "page; the service's log says more.")  # fmt: skip


__all__ = ["UiApp"]
