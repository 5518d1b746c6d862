"""``github_workflow`` with a GitHub App credential that cannot work: the first dispatch fails
the gate's check loudly (as a refused token does) instead of leaving it "waiting" until its
deadline; a mint that could not reach GitHub is still waited out."""

from __future__ import annotations

import httpx
import pytest
import respx
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from tests.gh._workflow_support import DATE, DISPATCH, Probe, gate
from tests.gh.conftest import API, START_MS
from zuke import NotYet, WaitFailed
from zuke._clock import ManualClock
from zuke_gh import (
    AppCredentials,
    AppTokenSource,
    GitHubAppKeyError,
    GitHubClient,
    RetryPolicy,
    app_jwt,
    github_workflow,
)

WHERE = "github_workflow acme/app e2e.yml@main"


def _pem(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()  # fmt: skip


@pytest.fixture(scope="module")
def good_pem() -> str:
    return _pem(rsa.generate_private_key(public_exponent=65537, key_size=2048))


def corrupt(pem: str) -> str:
    """The PEM with its body damaged in the middle (a bad copy-paste into a secret)."""
    lines = pem.splitlines()
    lines[5] = "!" * len(lines[5])
    return "\n".join(lines)


@pytest.fixture
def app_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A GitHub App in the environment, as the gate's default client reads it."""
    for name in ("GH_TOKEN", "GITHUB_TOKEN", "ZUKE_GH_APP_PRIVATE_KEY_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GITHUB_API_URL", API)
    monkeypatch.setenv("ZUKE_GH_APP_ID", "99")
    monkeypatch.setenv("ZUKE_GH_APP_OWNER", "acme")


@pytest.mark.usefixtures("app_env")
@pytest.mark.parametrize(
    ("key", "problem"),
    [("corrupt", "the PEM is damaged"), ("ec", "is not an RSA key")],
)
def test_a_damaged_or_wrong_type_app_key_fails_the_first_dispatch(
    monkeypatch: pytest.MonkeyPatch, good_pem: str, key: str, problem: str
) -> None:
    pem = corrupt(good_pem) if key == "corrupt" else _pem(ec.generate_private_key(ec.SECP256R1()))
    monkeypatch.setenv("ZUKE_GH_APP_PRIVATE_KEY", pem)
    probe = Probe()
    trigger = github_workflow(lambda g: g.repo("acme/app").workflow("e2e.yml"))
    answer = probe.check(trigger)  # no transport: a request would fail, and none is made
    assert isinstance(answer, WaitFailed)
    assert answer.reason.startswith(f"{WHERE}: cannot dispatch: the GitHub App private key")
    assert problem in answer.reason and "\n" not in answer.reason
    assert pem.splitlines()[2] not in answer.reason  # the key is never quoted
    assert probe.meta == {}  # nothing claims a dispatch


def test_a_key_that_loads_but_cannot_sign_is_refused_by_name() -> None:
    class Unsigning:  # what a key too small for RS256 does: cryptography raises ValueError
        def sign(self, *args: object) -> bytes:
            raise ValueError("Digest too big for RSA key")

    with pytest.raises(GitHubAppKeyError, match="cannot sign an RS256 JWT") as caught:
        app_jwt(1, Unsigning(), START_MS)  # type: ignore[arg-type]
    assert caught.value.__context__ is None  # raised outside the except: nothing rides along


def app_client(router: respx.Router, clock: ManualClock, pem: str) -> GitHubClient:
    transport = httpx.MockTransport(router.handler)
    creds = AppCredentials(app_id=99, private_key=pem, owner="acme")
    source = AppTokenSource(creds, base_url=API, transport=transport, clock=clock, env={},
                            retry=RetryPolicy(max_attempts=1))  # fmt: skip
    client = GitHubClient(token=source, base_url=API, transport=transport, clock=clock)
    client._owned.append(source)
    return client


@pytest.mark.parametrize(
    ("status", "message", "hint"),
    [
        (401, "A JSON web token could not be decoded", "refused the App's JWT"),
        (404, "Not Found", "is not installed"),
        (422, "The permissions requested are not granted to this installation.", "permissions"),
    ],
)
def test_a_mint_github_refuses_fails_the_first_dispatch_and_sends_nothing(
    router: respx.Router, clock: ManualClock, good_pem: str, status: int, message: str, hint: str
) -> None:
    router.get("/orgs/acme/installation").respond(200, json={"id": 22})
    router.post("/app/installations/22/access_tokens").respond(status, json={"message": message})
    post = router.post(DISPATCH).respond(204, headers={"Date": DATE})
    probe = Probe()
    with app_client(router, clock, good_pem) as client:
        answer = probe.check(gate(client))
    assert isinstance(answer, WaitFailed)
    assert answer.reason.startswith(f"{WHERE}: cannot dispatch: ")
    assert str(status) in answer.reason and hint in answer.reason
    assert post.call_count == 0 and probe.meta == {}  # undone: nothing was dispatched


def test_a_mint_that_could_not_reach_github_keeps_waiting_and_dispatches_later(
    router: respx.Router, clock: ManualClock, good_pem: str
) -> None:
    installation = router.get("/orgs/acme/installation")
    installation.side_effect = httpx.ConnectError("[Errno 111] Connection refused")
    probe = Probe()
    with app_client(router, clock, good_pem) as client:
        trigger = gate(client)
        first = probe.check(trigger)
        assert isinstance(first, NotYet) and "never reached GitHub" in (first.reason or "")
        assert probe.meta == {}
        installation.side_effect = None
        installation.respond(200, json={"id": 22})
        router.post("/app/installations/22/access_tokens").respond(
            201, json={"token": "ghs_minted", "expires_at": "2030-01-01T00:00:00Z"}
        )
        post = router.post(DISPATCH).respond(204, headers={"Date": DATE})
        again = probe.check(trigger)
    assert isinstance(again, NotYet) and "dispatched" in (again.reason or "")
    assert post.call_count == 1 and probe.meta["marker"] == "zuke:r1:e2e"
