"""GitHub App installation tokens: the JWT, the keys it accepts, the
installation lookup, minting, caching until shortly before expiry, masking."""

from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from tests.gh.conftest import API, START_MS
from zuke._clock import ManualClock, iso
from zuke_gh import (
    AppCredentials,
    AppTokenSource,
    GitHubAppKeyError,
    GitHubClient,
    GitHubError,
    app_jwt,
)

MINTED = "ghs_INSTALLATIONtoken000000000000000001"


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem(key: rsa.RSAPrivateKey, fmt: serialization.PrivateFormat) -> str:
    return key.private_bytes(serialization.Encoding.PEM, fmt, serialization.NoEncryption()).decode()


@pytest.fixture(scope="module")
def pkcs1(key: rsa.RSAPrivateKey) -> str:
    return _pem(key, serialization.PrivateFormat.TraditionalOpenSSL)


@pytest.fixture(scope="module")
def pkcs8(key: rsa.RSAPrivateKey) -> str:
    return _pem(key, serialization.PrivateFormat.PKCS8)


def _decode(part: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


def _verified_claims(jwt: str, key: rsa.RSAPrivateKey) -> dict[str, Any]:
    head, body, signature = jwt.split(".")
    raw = base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4))
    key.public_key().verify(raw, f"{head}.{body}".encode(), padding.PKCS1v15(), hashes.SHA256())
    assert _decode(head) == {"alg": "RS256", "typ": "JWT"}
    claims: dict[str, Any] = _decode(body)
    return claims


@pytest.mark.parametrize("form", ["pkcs1", "pkcs8"])
def test_the_jwt_is_rs256_signed_with_github_s_claims(
    form: str, request: pytest.FixtureRequest, key: rsa.RSAPrivateKey
) -> None:
    pem = request.getfixturevalue(form)
    assert ("BEGIN RSA PRIVATE KEY" in pem) == (form == "pkcs1")
    claims = _verified_claims(app_jwt(12345, pem, START_MS), key)
    issued = START_MS // 1000 - 60
    assert claims == {"iat": issued, "exp": issued + 540, "iss": "12345"}


def test_a_key_file_and_a_key_with_escaped_newlines_both_sign(
    tmp_path: Path, pkcs1: str, key: rsa.RSAPrivateKey
) -> None:
    path = tmp_path / "app.pem"
    path.write_text(pkcs1)
    _verified_claims(app_jwt("Iv1.abc", path, START_MS), key)
    _verified_claims(app_jwt(1, pkcs1.replace("\n", "\\n"), START_MS), key)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("   \n", "is empty"),
        ("MIIEowIBAAKCAQEA", "is not PEM"),
        ("-----BEGIN RSA PRIVATE KEY-----\n!!!notbase64!!!\n-----END RSA PRIVATE KEY-----\n",
         "could not be read"),
        ("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
         "is encrypted"),
    ],
)  # fmt: skip
def test_an_unusable_key_gets_a_named_error(text: str, problem: str) -> None:
    with pytest.raises(GitHubAppKeyError, match=problem) as caught:
        app_jwt(1, text, START_MS)
    assert caught.value.__context__ is None and isinstance(caught.value, ValueError)


def test_a_truncated_key_is_unreadable_and_its_text_is_not_quoted(pkcs8: str) -> None:
    cut = pkcs8[: len(pkcs8) // 2] + "\n-----END PRIVATE KEY-----\n"
    with pytest.raises(GitHubAppKeyError, match="could not be read") as caught:
        app_jwt(1, cut, START_MS)
    assert pkcs8.splitlines()[1] not in str(caught.value)


def test_a_key_that_is_not_rsa_is_refused() -> None:
    pem = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()  # fmt: skip
    with pytest.raises(GitHubAppKeyError, match="not an RSA key"):
        app_jwt(1, pem, START_MS)


def test_a_missing_key_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(GitHubAppKeyError, match=r"could not read .*nope\.pem'.*No such file"):
        app_jwt(1, tmp_path / "nope.pem", START_MS)


def test_credentials_are_checked_and_hide_the_key(pkcs1: str) -> None:
    creds = AppCredentials(
        app_id=7, private_key=pkcs1, owner="acme", permissions={"pull-requests": "write"}
    )
    assert creds.permissions == {"pull_requests": "write"}
    assert "PRIVATE" not in repr(creds)
    with pytest.raises(GitHubAppKeyError, match="app id"):
        AppCredentials(app_id="", private_key=pkcs1, owner="acme")
    with pytest.raises(GitHubAppKeyError, match="owner"):
        AppCredentials(app_id=7, private_key=pkcs1, owner="")
    with pytest.raises(GitHubError, match="'/'"):
        AppCredentials(app_id=7, private_key=pkcs1, owner="acme", repositories=("acme/app",))
    with pytest.raises(GitHubAppKeyError, match="read, write or admin"):
        AppCredentials(app_id=7, private_key=pkcs1, owner="acme", permissions={"contents": "all"})


class FakeApp:
    """GitHub's App endpoints on a respx router; records what it was sent."""

    def __init__(self, router: respx.Router, clock: ManualClock) -> None:
        self.clock = clock
        self.mints: list[dict[str, Any]] = []
        self.auth: list[str] = []
        self.lifetime_ms = 3_600_000
        self.api_auth: list[str] = []
        router.get("/repos/acme/app/installation").mock(side_effect=self._installation(11))
        router.get("/orgs/acme/installation").mock(side_effect=self._installation(22))
        router.get("/orgs/solo/installation").respond(404, json={"message": "Not Found"})
        router.get("/users/solo/installation").mock(side_effect=self._installation(33))
        router.get("/orgs/ghost/installation").respond(404, json={"message": "Not Found"})
        router.get("/users/ghost/installation").respond(404, json={"message": "Not Found"})
        router.post(url__regex=r"/app/installations/\d+/access_tokens").mock(side_effect=self._mint)
        self.api = router.get("/repos/acme/app").mock(side_effect=self._api)

    def _installation(self, number: int) -> Any:
        def answer(request: httpx.Request) -> httpx.Response:
            self.auth.append(request.headers["authorization"])
            return httpx.Response(200, json={"id": number, "account": {"login": "x"}})

        return answer

    def _mint(self, request: httpx.Request) -> httpx.Response:
        self.auth.append(request.headers["authorization"])
        self.mints.append({"path": request.url.path, "body": json.loads(request.content)})
        token = f"ghs_minted{len(self.mints):030d}"
        expires = iso(self.clock.now_ms() + self.lifetime_ms).replace(".000Z", "Z")
        return httpx.Response(201, json={"token": token, "expires_at": expires})

    def _api(self, request: httpx.Request) -> httpx.Response:
        self.api_auth.append(request.headers.get("authorization", ""))
        return httpx.Response(200, json={"id": 1})


@pytest.fixture
def app(router: respx.Router, clock: ManualClock) -> FakeApp:
    return FakeApp(router, clock)


@pytest.fixture
def source_for(router: respx.Router, clock: ManualClock, pkcs1: str):
    made: list[AppTokenSource] = []

    def make(owner: str = "acme", **options: Any) -> AppTokenSource:
        fields = {k: options.pop(k) for k in ("repositories", "permissions") if k in options}
        creds = AppCredentials(app_id=99, private_key=pkcs1, owner=owner, **fields)
        options.setdefault("env", {})
        source = AppTokenSource(
            creds, base_url=API, transport=httpx.MockTransport(router.handler), clock=clock,
            **options,
        )  # fmt: skip
        made.append(source)
        return source

    yield make
    for source in made:
        source.close()


def test_an_org_installation_is_looked_up_and_minted_unnarrowed_with_the_app_jwt(
    app: FakeApp, source_for: Any, key: rsa.RSAPrivateKey
) -> None:
    token = source_for().token()
    assert token == f"ghs_minted{1:030d}"
    assert app.mints == [{"path": "/app/installations/22/access_tokens", "body": {}}]
    for header in app.auth:
        assert header.startswith("Bearer ")
        assert _verified_claims(header.removeprefix("Bearer "), key)["iss"] == "99"


def test_named_repositories_use_the_repository_installation_and_narrow_the_token(
    app: FakeApp, source_for: Any
) -> None:
    source = source_for(repositories=("app", "lib"), permissions={"contents": "write"})
    source.token()
    assert app.mints == [
        {
            "path": "/app/installations/11/access_tokens",
            "body": {"repositories": ["app", "lib"], "permissions": {"contents": "write"}},
        }
    ]
    assert source.installation_id() == 11


def test_a_personal_account_falls_back_to_the_user_installation(
    app: FakeApp, source_for: Any
) -> None:
    source_for(owner="solo").token()
    assert app.mints[0]["path"] == "/app/installations/33/access_tokens"


def test_an_app_installed_nowhere_says_so(app: FakeApp, source_for: Any) -> None:
    with pytest.raises(GitHubError) as caught:
        source_for(owner="ghost").token()
    assert str(caught.value) == (
        "GitHub answered 404 to GET /users/ghost/installation: Not Found. "
        "The App 99 is not installed on ghost: install it there."
    )


def test_a_refused_jwt_points_at_the_id_the_key_and_the_clock(
    router: respx.Router, source_for: Any
) -> None:
    router.get("/orgs/acme/installation").respond(401, json={"message": "bad JWT"})
    with pytest.raises(GitHubError, match=r"check the app id and the private key.*clock"):
        source_for().token()


def test_a_mint_answer_without_a_token_is_an_error(router: respx.Router, source_for: Any) -> None:
    router.get("/orgs/acme/installation").respond(200, json={"id": 5})
    router.post("/app/installations/5/access_tokens").respond(201, json={"expires_at": "x"})
    with pytest.raises(GitHubError, match="carried no token"):
        source_for().token()


def test_an_installation_answer_without_a_numeric_id_asks_if_the_app_is_installed(
    router: respx.Router, source_for: Any
) -> None:
    router.get("/orgs/acme/installation").respond(200, json={"id": "five"})
    with pytest.raises(GitHubError, match="is the app installed on acme"):
        source_for().token()


def test_the_token_is_cached_until_five_minutes_before_it_expires(
    app: FakeApp, source_for: Any, clock: ManualClock
) -> None:
    source = source_for()
    first = source.token()
    clock.advance(3_600_000 - 300_000 - 1)
    assert source.token() == first and len(app.mints) == 1
    clock.advance(1)
    assert source.token() != first and len(app.mints) == 2


def test_expiry_is_judged_by_github_s_clock_at_minting(
    router: respx.Router, source_for: Any, clock: ManualClock
) -> None:
    # GitHub's clock is 10 minutes behind ours: the token still lives an hour from now.
    router.get("/orgs/acme/installation").respond(200, json={"id": 5})
    github_now = START_MS - 600_000
    mint = router.post("/app/installations/5/access_tokens").respond(
        201,
        json={"token": MINTED, "expires_at": iso(github_now + 3_600_000)},
        headers={"Date": "Tue, 14 Nov 2023 22:03:20 GMT"},
    )
    source = source_for()
    source.token()
    clock.advance(3_600_000 - 300_001)
    source.token()
    assert mint.call_count == 1


def test_concurrent_callers_share_one_mint(app: FakeApp, source_for: Any) -> None:
    source = source_for()
    start = threading.Barrier(8)
    tokens: list[str] = []

    def call() -> None:
        start.wait()
        tokens.append(source.token())

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(tokens)) == 1 and len(app.mints) == 1


def test_under_github_actions_each_minted_token_is_masked_once(
    app: FakeApp, source_for: Any, clock: ManualClock
) -> None:
    out = io.StringIO()
    source = source_for(env={"GITHUB_ACTIONS": "true"}, out=out)
    first = source.token()
    source.token()
    clock.advance(3_600_000)
    second = source.token()
    assert out.getvalue().splitlines() == [f"::add-mask::{first}", f"::add-mask::{second}"]


def test_outside_github_actions_nothing_is_printed(
    app: FakeApp, source_for: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    source_for(env={"GITHUB_ACTIONS": "false"}).token()
    assert capsys.readouterr().out == ""


def test_the_client_sends_the_installation_token(
    app: FakeApp, router: respx.Router, source_for: Any
) -> None:
    source = source_for()
    with GitHubClient(token=source, transport=httpx.MockTransport(router.handler)) as client:
        client.get("/repos/{owner}/{repo}", owner="acme", repo="app")
        assert app.api_auth == [f"Bearer ghs_minted{1:030d}"]
        assert repr(client).endswith("auth=AppTokenSource)")
    assert "PRIVATE" not in repr(source)


def test_a_refused_installation_token_is_minted_again_once_and_the_call_retried(
    app: FakeApp, router: respx.Router, source_for: Any
) -> None:
    refused = {f"Bearer ghs_minted{1:030d}"}  # the first token was revoked

    def api(request: httpx.Request) -> httpx.Response:
        app.api_auth.append(request.headers["authorization"])
        if request.headers["authorization"] in refused:
            return httpx.Response(401, json={"message": "Bad credentials"})
        return httpx.Response(200, json={"id": 1})

    app.api.mock(side_effect=api)
    source = source_for()
    with GitHubClient(token=source, transport=httpx.MockTransport(router.handler)) as client:
        assert client.get("/repos/{owner}/{repo}", owner="acme", repo="app").status == 200
        assert app.api_auth == [f"Bearer ghs_minted{1:030d}", f"Bearer ghs_minted{2:030d}"]
        refused.add(f"Bearer ghs_minted{2:030d}")
        refused.add(f"Bearer ghs_minted{3:030d}")
        with pytest.raises(GitHubError, match="401"):  # refreshed once per call, not forever
            client.get("/repos/{owner}/{repo}", owner="acme", repo="app")
    assert len(app.mints) == 3


def test_a_fixed_token_refused_with_401_is_an_error_at_once(router: respx.Router) -> None:
    route = router.get("/repos/acme/app").respond(401, json={"message": "Bad credentials"})
    with (
        GitHubClient(
            token="ghp_fixedTOKEN1234", transport=httpx.MockTransport(router.handler)
        ) as client,
        pytest.raises(GitHubError, match="401"),
    ):
        client.get("/repos/{owner}/{repo}", owner="acme", repo="app")
    assert route.call_count == 1


def test_from_env_uses_an_app_over_a_token_with_the_owner_from_github_repository(
    app: FakeApp, router: respx.Router, clock: ManualClock, pkcs1: str, tmp_path: Path
) -> None:
    path = tmp_path / "app.pem"
    path.write_text(pkcs1)
    env = {"ZUKE_GH_APP_ID": "99", "ZUKE_GH_APP_PRIVATE_KEY_FILE": str(path),
           "GITHUB_REPOSITORY": "acme/app", "GITHUB_TOKEN": "ghs_actions_default"}  # fmt: skip
    transport = httpx.MockTransport(router.handler)
    with GitHubClient.from_env(env, transport=transport, clock=clock) as client:
        client.get("/repos/{owner}/{repo}", owner="acme", repo="app")
    assert app.api_auth == [f"Bearer ghs_minted{1:030d}"]
    assert app.mints[0]["path"] == "/app/installations/22/access_tokens"


def test_from_env_narrows_to_named_repositories(
    app: FakeApp, router: respx.Router, clock: ManualClock, pkcs8: str
) -> None:
    env = {"ZUKE_GH_APP_ID": "99", "ZUKE_GH_APP_PRIVATE_KEY": pkcs8.replace("\n", "\\n"),
           "ZUKE_GH_APP_OWNER": "acme", "ZUKE_GH_APP_REPOSITORIES": "app, lib"}  # fmt: skip
    transport = httpx.MockTransport(router.handler)
    with GitHubClient.from_env(env, transport=transport, clock=clock) as c:
        c.get("/repos/{owner}/{repo}", owner="acme", repo="app")
    assert app.mints[0]["body"] == {"repositories": ["app", "lib"]}


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        ({"ZUKE_GH_APP_ID": "1"}, "no private key"),
        ({"ZUKE_GH_APP_PRIVATE_KEY": "x"}, "ZUKE_GH_APP_ID is not"),
        ({"ZUKE_GH_APP_ID": "1", "ZUKE_GH_APP_PRIVATE_KEY": "x"}, "ZUKE_GH_APP_OWNER"),
        ({"ZUKE_GH_APP_ID": "1", "ZUKE_GH_APP_PRIVATE_KEY": "", "ZUKE_GH_APP_OWNER": "a"},
         "no private key"),
        ({"ZUKE_GH_APP_ID": "1", "ZUKE_GH_APP_PRIVATE_KEY": "junk", "ZUKE_GH_APP_OWNER": "a"},
         "is not PEM"),
    ],
)  # fmt: skip
def test_from_env_refuses_an_incomplete_app(env: dict[str, str], problem: str) -> None:
    with pytest.raises(GitHubAppKeyError, match=problem):
        GitHubClient.from_env(env)


def test_a_failure_echoing_the_app_jwt_does_not_show_it(
    router: respx.Router, source_for: Any, caplog: pytest.LogCaptureFixture
) -> None:
    def echo(request: httpx.Request) -> httpx.Response:
        return httpx.Response(401, json={"message": request.headers["authorization"]})

    router.get("/orgs/acme/installation").mock(side_effect=echo)
    with pytest.raises(GitHubError) as caught:
        source_for().token()
    assert "Bearer <token>" in str(caught.value)
    assert "eyJ" not in str(caught.value) and "eyJ" not in caplog.text
