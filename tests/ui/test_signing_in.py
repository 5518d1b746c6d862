"""Signing in to the web view, and what nothing but a session opens: tokens, cookies, CSP.

A ``zuke serve`` on a thread; every answer read byte for byte. The browser's side of
the same flow is ``tests/ui/browser``.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.ui.support import (
    READ_TOKEN,
    TOKEN,
    Served,
    form_value,
    release,
    sign_in,
    view_server,
)
from zuke._errors import UsageError
from zuke._serve import StateServer
from zuke._serve.ui.http import CSP
from zuke.state.wire import record_to_json


def test_a_page_without_a_session_sends_you_to_the_login_form(served: Served) -> None:
    answer = served.client().get("/ui/runs/r1?ns=team")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login?next=%2Fui%2Fruns%2Fr1%3Fns%3Dteam"


@pytest.mark.parametrize(
    "path",
    ["/ui/", "/ui/runs/r1", "/ui/locks", "/ui/?status=suspended", "/ui/nowhere", "/ui/runs/"],
)
def test_nothing_but_the_login_form_and_static_files_answers_without_a_session(
    served: Served, path: str
) -> None:
    served.put(release("r1"))
    answer = served.client().get(path)
    assert answer.status_code == 303 and answer.headers["location"].startswith("/ui/login?next=")
    assert "r1" not in answer.text
    assert served.client().get("/ui/events?view=run&id=r1").status_code == 401


def test_signing_in_sets_a_strict_http_only_cookie_that_is_not_the_token(served: Served) -> None:
    client = served.client()
    answer = sign_in(client, served.url, TOKEN, next="/ui/locks")
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/locks"
    cookie = next(
        v
        for k, v in answer.headers.multi_items()
        if k == "set-cookie" and v.startswith("zuke_ui_session=")
    )
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui;" in cookie
    assert TOKEN not in cookie and TOKEN[:12] not in cookie
    assert client.get("/ui/").status_code == 200


def test_the_read_only_token_signs_in_too(served: Served) -> None:
    page = served.browser(READ_TOKEN).get("/ui/")
    assert page.status_code == 200 and "read-only token" in page.text


def test_a_wrong_token_is_refused_and_gets_no_session(served: Served) -> None:
    client = served.client()
    answer = sign_in(client, served.url, TOKEN + "x")
    assert answer.status_code == 200 and "That token is not accepted." in answer.text
    assert "zuke_ui_session" not in answer.headers.get("set-cookie", "")
    assert client.get("/ui/").status_code == 303


def test_a_sign_in_without_the_forms_own_cookie_is_refused(served: Served) -> None:
    form = served.client().get("/ui/login")  # another client: its cookie stays there
    forged = served.client().post(
        "/ui/login",
        data={"form": form_value(form.text), "token": TOKEN},
        headers={"Origin": served.url},
    )
    assert "The sign-in form expired" in forged.text
    assert "zuke_ui_session" not in forged.headers.get("set-cookie", "")


@pytest.mark.parametrize(
    "headers",
    [{"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"}],
)
def test_a_sign_in_posted_from_another_site_is_refused(
    served: Served, headers: dict[str, str]
) -> None:
    client = served.client()
    form = client.get("/ui/login")
    answer = client.post(
        "/ui/login", data={"form": form_value(form.text), "token": TOKEN}, headers=headers
    )
    assert answer.status_code == 403
    assert "zuke_ui_session" not in answer.headers.get("set-cookie", "")


@pytest.mark.parametrize("target", ["https://evil.example/", "//evil.example/ui/", "/ui\\@evil"])
def test_after_signing_in_you_stay_on_the_view(served: Served, target: str) -> None:
    answer = sign_in(served.client(), served.url, TOKEN, next=target)
    assert answer.status_code == 303 and answer.headers["location"] == "/ui/"


def test_neither_the_read_only_token_nor_the_views_cookie_opens_the_state_api(
    served: Served,
) -> None:
    served.put(release("r1"))
    read = {"Authorization": f"Bearer {READ_TOKEN}"}
    body = {"holder": {"actor": "a", "runId": "r", "since": "s"}, "ttlMs": 1000}
    with httpx.Client(base_url=served.url) as raw:
        assert raw.post("/locks/k", json=body, headers=read).status_code == 401
        assert raw.delete("/runs/r1", headers=read).status_code == 401
        assert raw.get("/runs/r1", headers=read).status_code == 401
    # The cookie is scoped to /ui (no browser sends it to the API), and not taken if sent.
    session = served.browser().cookies["zuke_ui_session"]
    with httpx.Client(base_url=served.url, headers={"Cookie": f"zuke_ui_session={session}"}) as c:
        assert c.get("/ui/").status_code == 200  # it is a valid session
        assert c.get("/runs/r1").status_code == 401
        assert c.delete("/runs/r1").status_code == 401
    assert served.api.get("/runs/r1").status_code == 200


def test_the_view_has_no_route_that_writes(served: Served) -> None:
    browser = served.browser()
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        assert browser.request(method, "/ui/runs/r1").status_code == 405


def test_every_page_sends_a_strict_content_security_policy(served: Served) -> None:
    served.put(release("r1"))
    browser = served.browser()
    for path in ("/ui/", "/ui/runs/r1", "/ui/locks", "/ui/runs/nope", "/ui/?status=bad"):
        answer = browser.get(path)
        assert answer.headers["content-security-policy"] == CSP, path
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["cache-control"] == "no-store"
        assert "<script>" not in answer.text and " style=" not in answer.text  # no inline
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    login = served.client().get("/ui/login")
    assert login.headers["content-security-policy"] == CSP


def test_static_files_are_public_hashed_and_kept(served: Served) -> None:
    page = served.client().get("/ui/login").text
    paths = re.findall(r'(?:href|src)="(/ui/static/[^"]+)"', page)
    assert len(paths) == 3  # icon, stylesheet, script
    for path in paths:
        answer = served.client().get(path)
        assert answer.status_code == 200 and "immutable" in answer.headers["cache-control"]
        assert re.search(r"\.[0-9a-f]{12}\.(css|js|svg)$", path)
    assert served.client().get("/ui/static/ui.css").status_code == 404  # only by its hash


def test_without_the_view_ui_is_an_ordinary_namespace_again(tmp_path: Path) -> None:
    with view_server(tmp_path, ui=False) as off:
        assert off.client().get("/ui/").status_code == 401  # the state API's bearer gate
        off.api.put(
            "/ui/runs/r1", json=record_to_json(release("r1")), headers={"If-None-Match": "*"}
        )
        assert off.api.get("/ui/runs/r1").status_code == 200


def test_the_no_ui_flag_of_a_real_zuke_serve_turns_the_view_off(tmp_path: Path) -> None:
    from tests.serve.support import running_server

    with running_server(tmp_path, args=("--no-ui",)) as off, httpx.Client(base_url=off.url) as raw:
        answer = raw.get("/ui/")
        assert answer.status_code == 401 and answer.json() == {"error": "unauthorized"}
    with running_server(tmp_path) as on, httpx.Client(base_url=on.url) as raw:
        assert raw.get("/ui/").headers["location"] == "/ui/login?next=%2Fui%2F"


def test_a_read_only_token_without_a_write_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="READ_TOKEN is set, but --no-auth needs no token"):
        StateServer(db_path=tmp_path / "s.db", no_auth=True, read_token="r")


def test_a_read_only_token_with_no_auth_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from zuke._serve.__main__ import main

    monkeypatch.setenv("ZUKE_SERVE_READ_TOKEN", READ_TOKEN)
    assert main(["--no-auth", "--db", str(tmp_path / "s.db")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("zuke serve: ZUKE_SERVE_READ_TOKEN is set")
    assert READ_TOKEN not in err
    assert not (tmp_path / "s.db").exists()  # nothing half-made


def test_without_a_token_the_view_asks_for_none(tmp_path: Path) -> None:
    with view_server(tmp_path, token=None, read_token=None, no_auth=True) as open_view:
        assert open_view.client().get("/ui/").status_code == 200
        assert open_view.client().get("/ui/login").status_code == 303
