"""What the HTTP state client and the state service share: header names, URL trust.

This module owns the constants of the published Zuke state HTTP API (the
protocol header and its version, our ``journal`` feature flag) and the rules
for deciding whether a state URL may carry a bearer token: plaintext
``http://`` only to a loopback host unless the operator opts out.

It imports only the standard library, so ``zuke serve`` can use it without
pulling in the client's HTTP stack.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from urllib.parse import urlsplit, urlunsplit

from zuke._errors import StateError

PROTOCOL_HEADER = "x-zuke-state-protocol"
PROTOCOL_VERSION = "1"
# Our extension: a server that answers PATCH /runs/:id with a RunDelta says so
# on every response, so a client can tell "this run is absent" (404 + feature)
# from "this server has no PATCH" (404/405/501 without it).
FEATURES_HEADER = "x-zuke-state-features"
JOURNAL_FEATURE = "journal"
# Our extension: a write's idempotency key (1-200 characters of the id alphabet). A server
# that knows it keeps it with the write, and answers the same request sent again (its
# answer lost) as the write landed; one that does not ignores it, as unknown headers are.
WRITE_ID_HEADER = "x-zuke-write-id"

#: The largest ``limit`` a listing accepts (``zuke serve`` answers 400 above it;
#: the client sends at most this, which lists everything a store could hold).
MAX_LIST_LIMIT = 2**31 - 1

ALLOW_INSECURE_ENV = "ZUKE_ALLOW_INSECURE_URL"
STATE_URL_ENV = "ZUKE_STATE_URL"


class InsecureStateUrlError(StateError):
    """``ZUKE_STATE_URL`` would send the token in plaintext (or is not an http(s) URL)."""


def redact_url(url: str) -> str:
    """``url`` with any ``user:password@`` replaced by ``***@``, safe to show."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` names this machine: ``localhost``, ``127.0.0.0/8`` or ``::1``."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def check_url_is_secure(url: str, env: Mapping[str, str]) -> None:
    """Refuse a state URL that would carry the bearer token in plaintext.

    ``https://`` is always accepted; ``http://`` only to a loopback host, or
    when ``env[ZUKE_ALLOW_INSECURE_URL] == "1"``. Raises
    :class:`InsecureStateUrlError` naming ``ZUKE_STATE_URL`` (credentials in
    the URL are redacted). Stores built in code are not checked: this is for
    the environment-driven resolver.
    """
    shown = redact_url(url)
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
    except ValueError:
        raise InsecureStateUrlError(
            f"state: {STATE_URL_ENV} {shown} is not a valid URL: use https://HOST[/PREFIX]"
        ) from None
    scheme = parts.scheme.lower()
    if scheme == "https" and host:
        return
    if scheme != "http" or not host:
        raise InsecureStateUrlError(
            f"state: {STATE_URL_ENV} {shown} is not an http(s) URL: use https://HOST[/PREFIX]"
        )
    if is_loopback_host(host) or env.get(ALLOW_INSECURE_ENV) == "1":
        return
    raise InsecureStateUrlError(
        f"state: {STATE_URL_ENV} {shown} is plaintext http:// to a host that is not "
        "loopback, so the state token would travel unencrypted. Use https://, or set "
        f"{ALLOW_INSECURE_ENV}=1 to accept that risk."
    )


__all__ = [
    "ALLOW_INSECURE_ENV",
    "FEATURES_HEADER",
    "JOURNAL_FEATURE",
    "MAX_LIST_LIMIT",
    "PROTOCOL_HEADER",
    "PROTOCOL_VERSION",
    "STATE_URL_ENV",
    "InsecureStateUrlError",
    "check_url_is_secure",
    "is_loopback_host",
    "redact_url",
]
