"""``GitHubClient``: the one REST (and GraphQL) caller every zuke_gh feature uses.

Synchronous on purpose: zuke's ``StateStore`` protocol is synchronous, and the
async ``github_workflow`` gate calls it through ``asyncio.to_thread``. Built on
httpx with an injectable transport (``httpx.MockTransport``, a respx router's
handler), so every path is testable without GitHub. What it guarantees —
paths checked and encoded, the token only for the configured origin, retries
in one budget, conditional GETs, one-line errors without the token — lives in
:mod:`zuke_gh._client_core`; this module adds :meth:`GitHubClient.from_env`,
which may build a GitHub App token source (:mod:`zuke_gh.app_token`, itself a
user of the core: no import circle).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke_gh import _env
from zuke_gh._client_core import (
    DEFAULT_API_VERSION,
    DEFAULT_USER_AGENT,
    ClientCore,
    GitHubResponse,
    StaticToken,
    TokenSource,
)
from zuke_gh._pacing import process_pacer
from zuke_gh._paths import repo_slug
from zuke_gh.app_token import AppCredentials, AppTokenSource
from zuke_gh.errors import GitHubAppKeyError

__all__ = [
    "DEFAULT_API_VERSION",
    "DEFAULT_USER_AGENT",
    "GitHubClient",
    "GitHubResponse",
    "StaticToken",
    "TokenSource",
    "token_from",
    "token_name",
]


class GitHubClient(ClientCore):
    """A synchronous GitHub REST client. Use as a context manager, or call :meth:`close`."""

    @classmethod
    def from_env(
        cls,
        env: Mapping[str, str] | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        **options: Any,
    ) -> GitHubClient:
        """A client configured like zuke's CI: see ``docs/github-client.md`` for the variables.

        ``GITHUB_API_URL`` is the base URL; a GitHub App (``ZUKE_GH_APP_ID`` with
        ``ZUKE_GH_APP_PRIVATE_KEY`` or ``ZUKE_GH_APP_PRIVATE_KEY_FILE``) wins over
        ``GH_TOKEN``, then ``GITHUB_TOKEN``; empty values count as unset.
        ``options`` go to the constructor.
        """
        env = os.environ if env is None else env
        base_url = _env.base_url_from(env)
        clock = options.get("clock", SYSTEM_CLOCK)
        token = token_from(env, base_url=base_url, transport=transport, clock=clock)
        if transport is None and "pacer" not in options:  # the pacing settings of ``env``
            options["pacer"] = process_pacer(base_url, env)
        options.setdefault("token_name", token_name(env, token))
        client = cls(token=token, base_url=base_url, transport=transport, **options)
        if hasattr(token, "close"):
            client._owned.append(token)
        return client


def token_name(env: Mapping[str, str], token: object) -> str:
    """Where ``token_from`` found the token, as a message names it (never the token)."""
    if isinstance(token, AppTokenSource):
        return f"the GitHub App {_env.env_value(env, 'ZUKE_GH_APP_ID')} (ZUKE_GH_APP_ID)"
    for name in ("GH_TOKEN", "GITHUB_TOKEN"):
        if token is not None and _env.env_value(env, name) == token:
            return name
    return "no token (set GH_TOKEN or GITHUB_TOKEN)"


def token_from(
    env: Mapping[str, str],
    *,
    base_url: str,
    transport: httpx.BaseTransport | None,
    clock: Clock,
) -> str | TokenSource | None:
    """An App token source, ``GH_TOKEN``, ``GITHUB_TOKEN``, or None (in that order)."""
    app_id = _env.env_value(env, "ZUKE_GH_APP_ID")
    key_text = _env.env_value(env, "ZUKE_GH_APP_PRIVATE_KEY")
    key_file = _env.env_value(env, "ZUKE_GH_APP_PRIVATE_KEY_FILE")
    if app_id is None and key_text is None and key_file is None:
        return _env.env_value(env, "GH_TOKEN") or _env.env_value(env, "GITHUB_TOKEN")
    if app_id is None:
        raise GitHubAppKeyError(
            "a GitHub App private key is set but ZUKE_GH_APP_ID is not: set the App's id."
        )
    if key_text is None and key_file is None:
        raise GitHubAppKeyError(
            "ZUKE_GH_APP_ID is set but no private key: set ZUKE_GH_APP_PRIVATE_KEY "
            "or ZUKE_GH_APP_PRIVATE_KEY_FILE."
        )
    owner = _env.env_value(env, "ZUKE_GH_APP_OWNER")
    repository = _env.env_value(env, "GITHUB_REPOSITORY")
    if owner is None and repository is not None:
        owner = repo_slug(repository)[0]
    if owner is None:
        raise GitHubAppKeyError(
            "a GitHub App needs the account it is installed on: set ZUKE_GH_APP_OWNER "
            "(or GITHUB_REPOSITORY)."
        )
    names = _env.env_value(env, "ZUKE_GH_APP_REPOSITORIES") or ""
    credentials = AppCredentials(
        app_id=app_id,
        private_key=Path(key_file) if key_file is not None else (key_text or ""),
        owner=owner,
        repositories=tuple(n.strip() for n in names.split(",") if n.strip()),
    )
    return AppTokenSource(credentials, base_url=base_url, transport=transport, clock=clock, env=env)
