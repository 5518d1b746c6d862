"""Reading the client's configuration from the environment, and checking the base URL.

The variables (also in ``docs/github-client.md``):

=================================  ==========================================================
``GITHUB_API_URL``                 the REST base URL (default ``https://api.github.com``;
                                   GitHub Enterprise: ``https://HOST/api/v3``)
``ZUKE_GH_APP_ID``                 a GitHub App's id (or client id): use installation tokens
``ZUKE_GH_APP_PRIVATE_KEY``        its PEM private key (``\\n`` escapes are accepted) ...
``ZUKE_GH_APP_PRIVATE_KEY_FILE``   ... or the path of the PEM file
``ZUKE_GH_APP_OWNER``              the installation's account (default: GITHUB_REPOSITORY's owner)
``ZUKE_GH_APP_REPOSITORIES``       comma-separated repository names to narrow the token to
``GH_TOKEN``, ``GITHUB_TOKEN``     a token, in that order, when no App is configured
=================================  ==========================================================

Empty values count as unset. An App wins over a token: configuring one is a
deliberate choice, while ``GITHUB_TOKEN`` is often present by default.
"""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from zuke_gh.errors import GitHubError

DEFAULT_BASE_URL = "https://api.github.com"
_LOOPBACK = ("localhost", "::1")


def env_value(env: Mapping[str, str], name: str) -> str | None:
    value = env.get(name, "").strip()
    return value or None


def normalise_base_url(text: str) -> str:
    """``text`` without trailing slashes, if it is a usable API base URL."""
    base = text.strip().rstrip("/")
    try:
        url = httpx.URL(base)
    except httpx.InvalidURL:
        url = httpx.URL("invalid:")
    if url.userinfo or "@" in base:
        raise GitHubError(
            "GitHub API URL carries credentials: drop them from GITHUB_API_URL and pass a token."
        )
    if url.scheme not in ("http", "https") or not url.host or url.query or url.fragment:
        raise GitHubError(
            f"GitHub API URL {base!r} is not an http(s) base URL: use https://api.github.com or, "
            "for GitHub Enterprise, https://HOST/api/v3 (GITHUB_API_URL)."
        )
    if url.scheme == "http" and not (url.host in _LOOPBACK or url.host.startswith("127.")):
        raise GitHubError(
            f"GitHub API URL http://{url.host}… is plaintext: use https (http is accepted only "
            "for 127.0.0.1 and localhost, where a test server runs)."
        )
    return base


def graphql_url(base: str) -> str:
    """GitHub's GraphQL endpoint for a REST base (GHES: ``/api/v3`` → ``/api/graphql``)."""
    if base.endswith("/api/v3"):
        return base[: -len("/v3")] + "/graphql"
    return base + "/graphql"


def base_url_from(env: Mapping[str, str]) -> str:
    return normalise_base_url(env_value(env, "GITHUB_API_URL") or DEFAULT_BASE_URL)
