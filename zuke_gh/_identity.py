"""Who a client writes as on GitHub: the one author whose markers zuke adopts.

Anyone may open an issue or post a comment, and copy any text into it — a
marker included. So an issue or comment found by its marker (after a crash or
a lost answer) is zuke's only if zuke's own identity wrote it:

* **a user token** (a personal or OAuth token): ``GET /user`` answers the
  account ("Get the authenticated user", docs.github.com REST users);
* **an installation token** — a workflow's ``GITHUB_TOKEN`` is one ("The
  GITHUB_TOKEN secret is a GitHub App installation access token",
  docs.github.com "Automatic token authentication"), as is an App's — is
  refused there with 403 "Resource not accessible by integration"; what it
  creates is authored by its App's bot user, ``<app-slug>[bot]``
  (``github-actions[bot]`` for ``GITHUB_TOKEN``; the login form
  actions/create-github-app-token documents for its ``app-slug`` output).
  GraphQL's ``viewer`` answers that bot for an installation token
  (fullsend-ai/fullsend#1953, pingdotgg/t3code#11273), in one query; GraphQL
  spells a bot's login without the ``[bot]`` REST shows, so a ``Bot`` viewer
  gets it back (the form REST's ``user.login`` has, which is what is compared).

Asked once per client — the first time a marker must be adopted — and kept
for the client's life (its token, however often an App token is minted
again, is the same identity).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

from zuke_gh._client_core import ClientCore
from zuke_gh.errors import GitHubError, transient

USER = "/user"
VIEWER = "query { viewer { login __typename } }"

_known: weakref.WeakKeyDictionary[ClientCore, str] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def rest_login(login: str, kind: object) -> str:
    """A GraphQL actor's login as REST spells it: a ``Bot`` gets its ``[bot]`` back."""
    if kind == "Bot" and not login.lower().endswith("[bot]"):
        return f"{login}[bot]"
    return login


def same_login(one: str | None, other: str | None) -> bool:
    """GitHub logins compare case-insensitively."""
    return one is not None and other is not None and one.lower() == other.lower()


def identity(client: ClientCore) -> str:
    """The login GitHub shows as the author of what ``client`` creates (asked once)."""
    with _lock:
        found = _known.get(client)
    if found is not None:
        return found
    login = _ask(client)
    with _lock:
        _known[client] = login
    return login


def _ask(client: ClientCore) -> str:
    try:
        answer = client.get(USER)
    except GitHubError as exc:
        if exc.status != 403 or transient(exc):  # a 401 or an outage: the caller's to judge
            raise
        return _viewer(client)  # an installation token: its App's bot
    login = answer.body.get("login") if isinstance(answer.body, Mapping) else None
    if not isinstance(login, str) or not login:
        raise GitHubError(
            f"GitHub's answer to GET {USER} names no login: cannot tell who {client.token_name} "
            "writes as. Check GITHUB_API_URL.",
            status=answer.status, method="GET", path=USER,
        )  # fmt: skip
    return login


def _viewer(client: ClientCore) -> str:
    body: Any = client.graphql(VIEWER)
    data = body.get("data") if isinstance(body, Mapping) else None
    viewer = data.get("viewer") if isinstance(data, Mapping) else None
    login = viewer.get("login") if isinstance(viewer, Mapping) else None
    if not isinstance(login, str) or not login:
        raise GitHubError(
            f"GitHub's GraphQL API names no viewer: cannot tell who {client.token_name} writes as "
            f"({_errors(body)}). Check the token.",
            method="POST", path="/graphql",
        )  # fmt: skip
    assert isinstance(viewer, Mapping)
    return rest_login(login, viewer.get("__typename"))


def _errors(body: Any) -> str:
    errors = body.get("errors") if isinstance(body, Mapping) else None
    said = [e.get("message") for e in errors if isinstance(e, Mapping)] if isinstance(
        errors, list) else []  # fmt: skip
    return "; ".join(str(s) for s in said if s) or "no errors given"
