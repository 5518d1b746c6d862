"""GitHub App installation tokens: find the installation, mint a token, keep it fresh.

:class:`AppTokenSource` is a :class:`~zuke_gh.client.TokenSource`: hand it to
``GitHubClient(token=...)`` and every request carries a current installation
token. It signs a JWT (:mod:`zuke_gh._jwt`), looks the installation up

* ``GET /repos/{owner}/{repo}/installation`` when repositories are named
  (the first one), else
* ``GET /orgs/{owner}/installation``, falling back to
  ``GET /users/{owner}/installation`` on a 404 (a personal account),

and mints with ``POST /app/installations/{id}/access_tokens``, sending
``repositories`` / ``permissions`` only when the credentials narrow them.
The token is reused until ``refresh_margin_s`` (5 minutes) before its
``expires_at``, judged by GitHub's clock at minting, then minted again; one
lock makes concurrent callers share one mint. Under GitHub Actions
(``GITHUB_ACTIONS=true``) each minted token is printed once as
``::add-mask::<token>`` so the runner masks it in every log.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

from zuke._clock import SYSTEM_CLOCK, Clock, parse_iso
from zuke_gh._client_core import ClientCore, GitHubResponse
from zuke_gh._jwt import app_jwt, load_private_key
from zuke_gh._paths import check_segment
from zuke_gh._retry import RetryPolicy
from zuke_gh.errors import GitHubAppKeyError, GitHubError, answered, github_detail

_LEVELS = ("read", "write", "admin")
_NOT_OURS = (401, 403, 404, 422)


@dataclass(frozen=True)
class AppCredentials:
    """Who the App is and what its tokens may touch. ``private_key``: PEM text or a file."""

    app_id: str | int
    private_key: str | Path = field(repr=False)
    owner: str
    #: Repository *names* (not ``owner/name``) to narrow the token to; empty: all installed.
    repositories: tuple[str, ...] = ()
    #: ``{"contents": "write", "actions": "write"}``; hyphens become underscores.
    permissions: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.app_id, bool) or not str(self.app_id).strip():
            raise GitHubAppKeyError("a GitHub App needs its app id (or client id): set app_id.")
        if not self.owner:
            raise GitHubAppKeyError("a GitHub App needs the account it is installed on: owner.")
        check_segment("App owner", self.owner)
        for name in self.repositories:
            check_segment("App repository name", name)
        permissions: dict[str, str] = {}
        for name, level in self.permissions.items():
            if level not in _LEVELS:
                raise GitHubAppKeyError(
                    f"GitHub App permission {name!r} has level {level!r}: use read, write or admin."
                )
            permissions[name.replace("-", "_")] = level
        object.__setattr__(self, "repositories", tuple(self.repositories))
        object.__setattr__(self, "permissions", permissions)


@dataclass(frozen=True)
class InstallationToken:
    """One minted token. ``expires_at_ms`` is GitHub's clock."""

    token: str = field(repr=False)
    expires_at_ms: int
    installation_id: int


class _AppJwt:
    """The App's own bearer token for the installation endpoints: a fresh JWT per request."""

    def __init__(self, app_id: str | int, key: Any, clock: Clock) -> None:
        self._app_id, self._key, self._clock = app_id, key, clock

    def token(self) -> str | None:
        return app_jwt(self._app_id, self._key, self._clock.now_ms())

    def __repr__(self) -> str:
        return "AppJwt(<hidden>)"


class AppTokenSource:
    """Installation tokens for one App installation, minted when needed and cached."""

    def __init__(
        self,
        credentials: AppCredentials,
        *,
        base_url: str | None = None,
        transport: httpx.BaseTransport | None = None,
        clock: Clock = SYSTEM_CLOCK,
        env: Mapping[str, str] | None = None,
        refresh_margin_s: float = 300.0,
        retry: RetryPolicy | None = None,
        out: IO[str] | None = None,
    ) -> None:
        self.credentials = credentials
        key = load_private_key(credentials.private_key)  # a bad key fails now, not mid-run:
        app_jwt(credentials.app_id, key, clock.now_ms())  # one that cannot sign too
        self._clock = clock
        self._env = os.environ if env is None else env
        self._margin_ms = int(refresh_margin_s * 1000)
        self._out = out
        self._client = ClientCore(
            token=_AppJwt(credentials.app_id, key, clock),
            base_url=base_url,
            transport=transport,
            clock=clock,
            retry=retry,
        )
        self._lock = threading.Lock()
        self._current: InstallationToken | None = None
        self._refresh_at_ms = 0
        self._installation_id: int | None = None

    def token(self) -> str:
        """A current installation token (minted now if none is fresh)."""
        with self._lock:
            if self._current is None or self._clock.now_ms() >= self._refresh_at_ms:
                self._mint_locked()
            assert self._current is not None
            return self._current.token

    def mint(self) -> InstallationToken:
        """Mint a new token now, replacing the cached one."""
        with self._lock:
            return self._mint_locked()

    def refresh(self) -> None:
        """The token was refused (401: revoked, or expired early): mint a new one now.
        The client calls this once when GitHub answers 401, then tries again."""
        self.mint()

    def installation_id(self) -> int:
        """The installation's id (looked up once)."""
        if self._installation_id is None:
            self._installation_id = self._lookup()
        return self._installation_id

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        creds = self.credentials
        return f"AppTokenSource(app_id={creds.app_id!r}, owner={creds.owner!r})"

    # -- steps -------------------------------------------------------------------------------

    def _mint_locked(self) -> InstallationToken:
        installation = self.installation_id()
        creds = self.credentials
        body: dict[str, Any] = {}
        if creds.repositories:
            body["repositories"] = list(creds.repositories)
        if creds.permissions:
            body["permissions"] = dict(creds.permissions)
        path = "/app/installations/{installation}/access_tokens"
        answer = self._call("POST", path, json=body, installation=installation)
        if answer.status == 404:
            self._installation_id = None  # uninstalled since the lookup: look again next time
        self._check(answer, "POST", f"/app/installations/{installation}/access_tokens")
        token = answer.body.get("token") if isinstance(answer.body, dict) else None
        expires = answer.body.get("expires_at") if isinstance(answer.body, dict) else None
        expires_ms = parse_iso(expires) if isinstance(expires, str) else None
        if not isinstance(token, str) or not token or expires_ms is None:
            raise GitHubError(
                f"the mint response for installation {installation} carried no token and expiry. "
                "Check GITHUB_API_URL.",
                status=answer.status,
                method="POST",
                path=f"/app/installations/{installation}/access_tokens",
            )
        minted = InstallationToken(token, expires_ms, installation)
        now = self._clock.now_ms()
        lifetime = expires_ms - (answer.server_time_ms or now)
        margin = self._margin_ms if lifetime > 2 * self._margin_ms else lifetime // 2
        self._current, self._refresh_at_ms = minted, now + lifetime - margin
        if self._env.get("GITHUB_ACTIONS") == "true":
            print(f"::add-mask::{token}", file=self._out or sys.stdout, flush=True)
        return minted

    def _lookup(self) -> int:
        creds = self.credentials
        if creds.repositories:
            repo = creds.repositories[0]
            answer = self._call(
                "GET", "/repos/{owner}/{repo}/installation", owner=creds.owner, repo=repo
            )
            self._check(answer, "GET", f"/repos/{creds.owner}/{repo}/installation", where=repo)
        else:
            answer = self._call("GET", "/orgs/{owner}/installation", owner=creds.owner)
            display = f"/orgs/{creds.owner}/installation"
            if answer.status == 404:
                answer = self._call("GET", "/users/{owner}/installation", owner=creds.owner)
                display = f"/users/{creds.owner}/installation"
            self._check(answer, "GET", display)
        found = answer.body.get("id") if isinstance(answer.body, dict) else None
        if isinstance(found, bool) or not isinstance(found, int):
            raise GitHubError(
                f"GitHub's installation answer for {creds.owner} has no numeric id: "
                f"is the app installed on {creds.owner}?",
                status=answer.status,
            )
        return found

    def _call(self, method: str, path: str, **kwargs: Any) -> GitHubResponse:
        return self._client.request(method, path, expected=_NOT_OURS, idempotent=True, **kwargs)

    def _check(self, answer: GitHubResponse, method: str, display: str, where: str = "") -> None:
        if answer.status < 300:
            return
        creds = self.credentials
        target = f"{creds.owner}/{where}" if where else creds.owner
        if answer.status == 404:
            hint = f"The App {creds.app_id} is not installed on {target}: install it there."
        elif answer.status == 401:
            hint = (
                "GitHub refused the App's JWT: check the app id and the private key, and that "
                "this machine's clock is right."
            )
        else:
            hint = "The App's installation does not grant this: check its permissions."
        detail = github_detail(answer.body, answer.body if isinstance(answer.body, str) else "")
        raise GitHubError(
            answered(method, display, answer.status, detail, hint),
            status=answer.status,
            method=method,
            path=display,
            detail=detail,
        )
