"""GitHub Apps on the fake: the JWT checked as GitHub checks it, installations, minted tokens
that act as ``<slug>[bot]`` and expire — driven by zuke_gh's own ``AppTokenSource`` over real
HTTP, and by hand for the refusals. Bodies schema-checked."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from fixtures.fake_github import FakeGitHub
from tests.fake_github.schema import conforms, v2022
from zuke._clock import ManualClock
from zuke_gh import AppCredentials, AppTokenSource, app_jwt


@pytest.fixture(scope="module")
def key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _public(key: rsa.RSAPrivateKey) -> str:
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


def _private(key: rsa.RSAPrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM,
                             serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()  # fmt: skip


@pytest.fixture
def app(gh: FakeGitHub, key: rsa.RSAPrivateKey) -> int:
    app_id = gh.add_app("zuke-app", _public(key), owner="acme",
                        permissions={"issues": "write", "metadata": "read"})  # fmt: skip
    gh.install_app("zuke-app", "acme", repositories=["acme/app"])
    return app_id


def _jwt(key: rsa.RSAPrivateKey, claims: dict[str, Any]) -> str:
    def part(data: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    head = f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}"
    signature = key.sign(head.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{head}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _bearer(gh: FakeGitHub, token: str) -> httpx.Client:
    return httpx.Client(base_url=gh.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def test_zuke_gh_mints_a_token_that_writes_as_the_apps_bot(
    gh: FakeGitHub, app: int, key: rsa.RSAPrivateKey, clock: ManualClock
) -> None:
    source = AppTokenSource(
        AppCredentials(app, _private(key), owner="acme", repositories=("app",)),
        base_url=gh.url, clock=clock, env={},
    )  # fmt: skip
    try:
        token = source.token()
    finally:
        source.close()
    assert token.startswith("ghs_")
    with _bearer(gh, token) as bot:
        issue = bot.post("/repos/acme/app/issues", json={"title": "t"}).json()
        assert (issue["user"]["login"], issue["user"]["type"]) == ("zuke-app[bot]", "Bot")
        me = bot.get("/user")
        assert (me.status_code, me.json()["message"]) == (
            403,
            "Resource not accessible by integration",
        )
        assert bot.get("/app").status_code == 401  # an installation token is no JWT
        refused = bot.put("/repos/acme/app/contents/a.md", json={"message": "m", "content": ""})
        assert refused.status_code == 403  # the App asked for no contents permission
    assert gh.stats()["endpoints"]["POST /app/installations/{installation_id}/access_tokens"] == 1


def test_get_app_answers_the_apps_slug_and_installations_match_the_schema(
    gh: FakeGitHub, app: int, key: rsa.RSAPrivateKey, clock: ManualClock
) -> None:
    with _bearer(gh, app_jwt(app, _private(key), clock.now_ms())) as jwt:
        found = conforms(v2022.Integration, jwt.get("/app").json())
        assert (found.id, found.slug) == (app, "zuke-app")
        inst = conforms(v2022.Installation, jwt.get("/repos/acme/app/installation").json())
        assert inst.app_slug == "zuke-app" and inst.repository_selection == "selected"
        assert jwt.get("/orgs/acme/installation").status_code == 200
        assert jwt.get("/users/someone/installation").status_code == 404
        minted = jwt.post(f"/app/installations/{inst.id}/access_tokens",
                          json={"permissions": {"issues": "read"}})  # fmt: skip
        assert minted.status_code == 201
        token = conforms(v2022.InstallationToken, minted.json())
        assert token.permissions is not None and token.permissions.issues == "read"
        wider = jwt.post(f"/app/installations/{inst.id}/access_tokens",
                         json={"permissions": {"contents": "write"}})  # fmt: skip
        assert wider.status_code == 422
        elsewhere = jwt.post(f"/app/installations/{inst.id}/access_tokens",
                             json={"repositories": ["other"]})  # fmt: skip
        assert elsewhere.status_code == 422
        assert jwt.get("/repos/acme/app/issues").status_code == 401  # a JWT is for /app only
    with _bearer(gh, token.token) as narrowed:
        assert narrowed.get("/repos/acme/app/issues").status_code == 200
        assert narrowed.post("/repos/acme/app/issues", json={"title": "t"}).status_code == 403
        gh.advance_clock(3600)
        expired = narrowed.get("/repos/acme/app/issues")
        assert (expired.status_code, expired.json()["message"]) == (401, "Bad credentials")


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ({"iat": -60, "exp": 660}, "'Expiration time' claim ('exp') is too far in the future"),
        ({"iat": -700, "exp": -10}, "'Expiration time' claim ('exp') must be a numeric value "
         "representing the future time at which the assertion expires"),
        ({"iat": 30, "exp": 500}, "'Issued at' claim ('iat') must be an Integer representing "
         "the time that the assertion was issued"),
    ],
)  # fmt: skip
def test_a_jwt_github_would_refuse_is_refused_with_githubs_401(
    gh: FakeGitHub, app: int, key: rsa.RSAPrivateKey, clock: ManualClock,
    claims: dict[str, int], message: str,
) -> None:  # fmt: skip
    now = clock.now_ms() // 1000
    token = _jwt(key, {"iss": str(app), **{k: now + v for k, v in claims.items()}})
    with _bearer(gh, token) as jwt:
        answer = jwt.get("/app")
        assert (answer.status_code, answer.json()["message"]) == (401, message)


def test_a_jwt_signed_by_another_key_or_for_no_app_cannot_be_decoded(
    gh: FakeGitHub, app: int, clock: ManualClock
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    now = clock.now_ms() // 1000
    for token in (
        _jwt(other, {"iss": str(app), "iat": now - 60, "exp": now + 500}),
        _jwt(other, {"iss": "999", "iat": now - 60, "exp": now + 500}),
        "not.a.jwt",
    ):
        with _bearer(gh, token) as jwt:
            answer = jwt.get("/app")
            assert answer.json()["message"] == "A JSON web token could not be decoded"
    assert gh.stats()["statuses"] == {"401": 3}
