"""Who may see the web view: a session cookie, given for the serve token or the read-only one.

When ``zuke serve`` has a token, the view asks for one once, through a login
form, and keeps a session in a cookie (``HttpOnly``, ``SameSite=Strict``,
``Path=/ui``; ``Secure`` when the browser says the form came over https). The
view accepts the write token (``ZUKE_SERVE_TOKEN``) or the read-only one
(``ZUKE_SERVE_READ_TOKEN``); neither cookie nor read-only token authorises a
request to the state API, which only takes ``Authorization: Bearer`` with the
write token.

The cookie never holds a token. Its value is ``v1.<kind>.<issued ms>.<mac>``,
the MAC an HMAC-SHA256 keyed by the token that was given: it proves the
holder knew the token without revealing it, any replica with the same tokens
checks it (nothing is kept in memory), it lapses after :data:`SESSION_MS`,
and changing the token ends every session made with it.

The login form is protected against cross-site posts twice: a random value in
a cookie of the form's own (``Path=/ui/login``, ``SameSite=Strict``) must come
back in a hidden field (a site that cannot read our cookie cannot send it),
and a browser's ``Origin`` and ``Sec-Fetch-Site`` headers, when sent, must say
the post came from this origin.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from http.cookies import CookieError, SimpleCookie
from typing import Literal
from urllib.parse import urlsplit

from zuke._clock import Clock

SESSION_COOKIE = "zuke_ui_session"
LOGIN_COOKIE = "zuke_ui_login"
#: how long a session lasts (a stolen cookie is worth at most this much)
SESSION_MS = 12 * 3600 * 1000
#: how long a login form's anti-forgery value lasts
LOGIN_FORM_S = 3600
#: a session stamped this far in the future (another replica's clock) is still taken
CLOCK_SKEW_MS = 5 * 60 * 1000
_CONTEXT = b"zuke-ui-session\x00"

Kind = Literal["write", "read"]


@dataclass(frozen=True)
class Session:
    """A signed-in browser: which token it gave, and when."""

    kind: Kind
    issued_ms: int


def cookies(headers: Mapping[str, str]) -> dict[str, str]:
    """The request's cookies by name (a malformed header counts as none)."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(headers.get("cookie", ""))
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


def _mac(token: str, kind: str, issued_ms: int) -> str:
    message = _CONTEXT + f"{kind}\x00{issued_ms}".encode()
    digest = hmac.new(token.encode(), message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _same(a: str, b: str) -> bool:
    """Constant-time equality that leaks neither content nor length."""
    return hmac.compare_digest(
        hashlib.sha256(a.encode()).digest(), hashlib.sha256(b.encode()).digest()
    )


class UiAuth:
    """The view's tokens: checks a login, makes and checks session cookies."""

    def __init__(self, *, token: str | None, read_token: str | None, clock: Clock) -> None:
        self._tokens: dict[Kind, str] = {}
        if token:
            self._tokens["write"] = token
        if read_token:
            self._tokens["read"] = read_token
        self._clock = clock

    @property
    def required(self) -> bool:
        """Whether the view asks for a token (serve has one)."""
        return bool(self._tokens)

    def login(self, given: str) -> Kind | None:
        """Which token ``given`` is (every one compared, in constant time), or ``None``."""
        found: Kind | None = None
        for kind, token in self._tokens.items():
            if _same(token, given) and given:
                found = kind
        return found

    def session_value(self, kind: Kind) -> str:
        """The cookie value of a new session for the token of ``kind``."""
        issued = self._clock.now_ms()
        return f"v1.{kind}.{issued}.{_mac(self._tokens[kind], kind, issued)}"

    def session(self, headers: Mapping[str, str]) -> Session | None:
        """The request's valid session, or ``None``; always one when no token is needed."""
        if not self.required:
            return Session(kind="write", issued_ms=0)
        value = cookies(headers).get(SESSION_COOKIE, "")
        parts = value.split(".")
        if len(parts) != 4 or parts[0] != "v1" or parts[1] not in self._tokens:
            return None
        kind: Kind = "write" if parts[1] == "write" else "read"
        if not (parts[2].isascii() and parts[2].isdigit() and len(parts[2]) < 16):
            return None
        issued = int(parts[2])
        now = self._clock.now_ms()
        if not now - SESSION_MS < issued <= now + CLOCK_SKEW_MS:
            return None
        if not _same(_mac(self._tokens[kind], kind, issued), parts[3]):
            return None
        return Session(kind=kind, issued_ms=issued)


def new_form_value() -> str:
    """A login form's anti-forgery value (also its cookie's)."""
    return secrets.token_urlsafe(32)


def form_value_matches(headers: Mapping[str, str], posted: str) -> bool:
    """Whether the login form's cookie came back and equals the posted hidden field."""
    expected = cookies(headers).get(LOGIN_COOKIE, "")
    return bool(expected) and bool(posted) and _same(expected, posted)


def same_origin_post(headers: Mapping[str, str]) -> bool:
    """Whether a browser's own headers say a post came from this origin (or say nothing).

    ``Sec-Fetch-Site`` (every current browser) must be ``same-origin``; an ``Origin``
    must name the host the request was sent to.
    """
    site = headers.get("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return False
    origin = headers.get("origin")
    if origin is None:
        return True
    netloc = urlsplit(origin.strip()).netloc
    return bool(netloc) and netloc.lower() == headers.get("host", "").strip().lower()


def over_https(headers: Mapping[str, str]) -> bool:
    """Whether the browser reached the view over https (its ``Origin`` on a post says so)."""
    return headers.get("origin", "").strip().lower().startswith("https://")


def session_cookie(value: str, *, secure: bool) -> str:
    """``Set-Cookie`` for a session: script cannot read it, no other site can send it."""
    return (
        f"{SESSION_COOKIE}={value}; Path=/ui; Max-Age={SESSION_MS // 1000}; HttpOnly; "
        f"SameSite=Strict{'; Secure' if secure else ''}"
    )


def cleared_session_cookie() -> str:
    return f"{SESSION_COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict"


def login_form_cookie(value: str) -> str:
    return (
        f"{LOGIN_COOKIE}={value}; Path=/ui/login; Max-Age={LOGIN_FORM_S}; HttpOnly; SameSite=Strict"
    )


__all__ = [
    "LOGIN_COOKIE",
    "SESSION_COOKIE",
    "SESSION_MS",
    "Session",
    "UiAuth",
    "cleared_session_cookie",
    "cookies",
    "form_value_matches",
    "login_form_cookie",
    "new_form_value",
    "over_https",
    "same_origin_post",
    "session_cookie",
]
