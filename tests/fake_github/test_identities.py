"""Tokens are identities: ETags scoped to the token, who ``GET /user`` says, who authors what
the fake creates, and the permissions, roles and repository scopes checked per token.

Real HTTP to the running fake; bodies checked against GitHub's schemas (``schema.conforms``).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub, RemoteFakeGitHub
from tests.fake_github.schema import conforms, conforms_list, v2022
from tests.fake_github.support import dispatch, put_file

ISSUES = "/repos/acme/app/issues"
RUNS = "/repos/acme/app/actions/runs"


def client(gh: FakeGitHub, token: str) -> httpx.Client:
    """Another client sending exactly what ``api`` sends, but for ``token``."""
    headers = {"Authorization": f"Bearer {token}", "X-GitHub-Api-Version": "2022-11-28"}
    return httpx.Client(base_url=gh.url, headers=headers, timeout=10)


# -- ETags


def test_an_etag_another_token_got_never_answers_304(gh: FakeGitHub, api: httpx.Client) -> None:
    """GitHub's ETags are per token (otterdog#201, ghs#52): every Actions job's fresh
    GITHUB_TOKEN re-reads in full, and pays for it."""
    gh.add_token("second-token")
    first = api.get(RUNS)
    etag = first.headers["etag"]
    assert api.get(RUNS, headers={"If-None-Match": etag}).status_code == 304
    with client(gh, "second-token") as other:
        again = other.get(RUNS, headers={"If-None-Match": etag})
        assert again.status_code == 200 and again.json() == first.json()
        assert again.headers["etag"] != etag
        assert int(again.headers["x-ratelimit-used"]) == 1  # counted: not a free 304
        assert other.get(RUNS, headers={"If-None-Match": again.headers["etag"]}).status_code == 304
    assert "Authorization" in first.headers["vary"]


def test_304s_and_requests_are_counted_per_token_and_in_total(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    gh.add_token("second-token")
    etag = api.get(RUNS).headers["etag"]
    for _ in range(3):
        assert api.get(RUNS, headers={"If-None-Match": etag}).status_code == 304
    with client(gh, "second-token") as other:
        other.get(RUNS, headers={"If-None-Match": etag})
    stats = gh.stats()
    assert stats["not_modified"] == 3
    assert stats["not_modified_by_token"] == {"token-1": 3}
    assert stats["requests_by_token"] == {"token-1": 4, "token-2": 1}
    remote = RemoteFakeGitHub(gh.url, gh.token).stats()  # the same over the control API
    assert remote["not_modified_by_token"] == {"token-1": 3}
    gh.reset_stats()
    assert gh.stats()["not_modified_by_token"] == {} and gh.stats()["requests_by_token"] == {}


# -- who a token is


def test_a_user_token_answers_get_user_and_an_installation_token_cannot(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    refused = api.get("/user")  # the default token is a GITHUB_TOKEN
    assert refused.status_code == 403
    assert refused.json()["message"] == "Resource not accessible by integration"
    conforms(v2022.BasicError, refused.json())
    gh.add_user("zuke-app[bot]", type="Bot")
    gh.set_token(gh.token, login="zuke-app[bot]")
    assert api.get("/user").status_code == 403  # an App installation has no user either
    token = gh.add_user_token("alice")
    with client(gh, token) as alice:
        me = conforms(v2022.PublicUser, alice.get("/user").json())
        assert (me.login, me.type) == ("alice", "User")


def test_what_a_token_creates_is_authored_by_its_identity(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    issue = api.post(ISSUES, json={"title": "t"}).json()
    assert (issue["user"]["login"], issue["user"]["type"]) == ("github-actions[bot]", "Bot")
    assert issue["user"]["id"] == 41898282
    gh.add_user("zuke-app[bot]", type="Bot")
    gh.set_token(gh.token, login="zuke-app[bot]")
    comment = api.post(f"{ISSUES}/{issue['number']}/comments", json={"body": "hi"}).json()
    assert (comment["user"]["login"], comment["user"]["type"]) == ("zuke-app[bot]", "Bot")
    gh.add_user("alice")
    gh.set_permission("acme/app", "alice", "write")
    with client(gh, gh.add_user_token("alice")) as alice:
        written = put_file(alice, "notes.md", "x\n")
        assert written.status_code == 201
        author = written.json()["commit"]["author"]
        assert author["name"] == "alice" and author["email"].endswith(
            "+alice@users.noreply.github.com"
        )
        listed = conforms_list(v2022.Commit, alice.get("/repos/acme/app/commits").json())
        assert listed[0].author is not None and listed[0].author.login == "alice"


# -- permissions, roles and scopes


@pytest.mark.parametrize(
    ("call", "needs"),
    [
        (lambda c: dispatch(c), "actions=write"),
        (lambda c: c.get(RUNS), "actions=read"),
        (lambda c: put_file(c, "a.md", "x"), "contents=write"),
        (lambda c: c.get("/repos/acme/app/contents/README.md"), "contents=read"),
        (lambda c: c.get("/repos/acme/app/git/ref/heads/main"), "contents=read"),
        (lambda c: c.get("/repos/acme/app/commits"), "contents=read"),
        (lambda c: c.post(ISSUES, json={"title": "t"}), "issues=write"),
        (lambda c: c.post("/repos/acme/app/deployments", json={"ref": "main"}),
         "deployments=write"),
        (lambda c: c.get("/repos/acme/app/deployments"), "deployments=read"),
        (lambda c: c.get("/repos/acme/app/environments"), "actions=read"),
    ],
)  # fmt: skip
def test_each_endpoint_checks_its_permission_per_token(
    gh: FakeGitHub, api: httpx.Client, call: Any, needs: str
) -> None:
    gh.set_token(gh.token, permissions={"metadata": "read"})  # a job with almost nothing
    refused = call(api)
    assert refused.status_code == 403, refused.text
    assert refused.json()["message"] == "Resource not accessible by integration"
    assert refused.headers["x-accepted-github-permissions"] == needs
    name, _, level = needs.partition("=")
    gh.set_token(gh.token, permissions={name: level})
    assert call(api).status_code < 400 or call(api).status_code in (404, 409, 422)
    assert api.get("/repos/acme/app").status_code == 200  # metadata: read is implicit


def test_an_unknown_token_is_401_bad_credentials_and_none_is_401_requires_auth(
    gh: FakeGitHub,
) -> None:
    with client(gh, "ghp_not_a_token") as stranger:
        answer = stranger.get(RUNS)
        assert (answer.status_code, answer.json()["message"]) == (401, "Bad credentials")
    bare = httpx.get(f"{gh.url}{RUNS}")
    assert (bare.status_code, bare.json()["message"]) == (401, "Requires authentication")
    assert gh.stats()["statuses"] == {"401": 2}


def test_a_private_repository_is_404_to_whoever_cannot_see_it(
    gh: FakeGitHub, api: httpx.Client
) -> None:
    gh.add_repo("acme/other")
    gh.set_token(gh.token, repositories=["acme/app"])  # a GITHUB_TOKEN: its own repository
    hidden = api.get("/repos/acme/other/issues")
    assert hidden.status_code == 404 and hidden.json()["message"] == "Not Found"
    assert api.get("/repos/acme/app/issues").status_code == 200
    with client(gh, gh.add_user_token("mallory")) as mallory:  # no role on a private repo
        assert mallory.get(ISSUES).status_code == 404
        assert mallory.post(ISSUES, json={"title": "x"}).status_code == 404
        gh.set_private("acme/app", False)  # public: anyone reads, opens issues, comments
        assert mallory.get(ISSUES).status_code == 200
        opened = mallory.post(ISSUES, json={"title": "x"})
        assert opened.status_code == 201 and opened.json()["user"]["login"] == "mallory"
        refused = dispatch(mallory)  # but writing contents or dispatching needs Write
        assert refused.status_code == 403
        assert refused.json()["message"] == "Resource not accessible by personal access token"
    gh.set_private("acme/other", False)
    assert api.get("/repos/acme/other/issues").status_code == 200  # public: reads
    out_of_scope = api.post("/repos/acme/other/issues", json={"title": "t"})
    assert out_of_scope.status_code == 403  # an installation writes only where installed


def test_a_users_token_reaches_what_the_users_role_does(gh: FakeGitHub) -> None:
    gh.add_user("rita")
    gh.set_permission("acme/app", "rita", "read")
    with client(gh, gh.add_user_token("rita")) as rita:
        assert rita.get(RUNS).status_code == 200
        assert rita.post(ISSUES, json={"title": "t"}).status_code == 201
        assert put_file(rita, "a.md", "x").status_code == 403
        gh.set_permission("acme/app", "rita", "write")  # promoted: the same token now writes
        assert put_file(rita, "a.md", "x").status_code == 201
        gh.set_permission("acme/app", "rita", "none")  # removed: the repository vanishes
        assert rita.get(RUNS).status_code == 404
    fine_grained = gh.add_user_token("wes", permissions={"issues": "write"})
    gh.set_permission("acme/app", "wes", "admin")
    with client(gh, fine_grained) as wes:  # an admin's fine-grained token: what it holds only
        assert wes.post(ISSUES, json={"title": "t"}).status_code == 201
        assert put_file(wes, "b.md", "x").status_code == 403


def test_an_installation_token_expires_into_401(gh: FakeGitHub, api: httpx.Client) -> None:
    gh.set_token(gh.token, expires_in_s=3600)
    assert api.get(RUNS).status_code == 200
    gh.advance_clock(3600)
    expired = api.get(RUNS)
    assert (expired.status_code, expired.json()["message"]) == (401, "Bad credentials")


def test_every_jobs_github_token_spends_its_repositorys_one_budget(gh: FakeGitHub) -> None:
    """GITHUB_TOKEN: 1,000 requests an hour per repository, whichever job's token asks."""
    gh.configure(rate_limit=3)
    for job in ("job-1", "job-2"):
        gh.add_token(job)
        gh.set_token(job, repositories=["acme/app"])
    gh.add_token("user-token")
    with client(gh, "job-1") as first, client(gh, "job-2") as second:
        assert [first.get(RUNS).status_code for _ in range(2)] == [200, 200]
        assert second.get(RUNS).headers["x-ratelimit-remaining"] == "0"
        assert second.get(RUNS).status_code == 403  # the repository's budget is spent
    with client(gh, "user-token") as other:
        assert other.get(RUNS).status_code == 200  # another identity's budget is its own
