"""The web view over HTTP (a ``zuke serve`` on a thread): signing in, what pages show, safety.

The browser's side of the same things is ``tests/ui/browser``; here every
answer is read byte for byte: headers, cookies, escaping, what never appears.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.ui.support import (
    HOSTILE,
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
from zuke.state.records import HeldLock, LockHolder, RunEvent, Signal, TargetRecord
from zuke.state.wire import record_to_json


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with view_server(tmp_path) as s:
        yield s


def test_a_page_without_a_session_sends_you_to_the_login_form(served: Served) -> None:
    answer = served.client().get("/ui/runs/r1?ns=team")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/ui/login?next=%2Fui%2Fruns%2Fr1%3Fns%3Dteam"


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


def test_the_runs_page_lists_a_suspended_run_and_where_it_waits(served: Served) -> None:
    served.put(release("r-suspended"))
    served.put(release("r-done", status="succeeded", created_at="2026-03-01T09:00:00.000Z"))
    page = served.browser().get("/ui/").text
    row = page.split('id="run-r-suspended"', 1)[1].split("</tr>", 1)[0]
    assert "suspended" in row and "waits at <strong>approve</strong>" in row
    assert "(signal:approved)" in row
    assert page.index("r-suspended") < page.index("r-done")  # newest first


def test_filters_narrow_the_list_and_a_bad_one_is_one_message(served: Served) -> None:
    served.put(release("r-alice", actor="alice"))
    served.put(release("r-bob", actor="bob", status="succeeded"))
    browser = served.browser()
    page = browser.get("/ui/?starter=bob").text
    assert 'id="run-r-bob"' in page and 'id="run-r-alice"' not in page
    page = browser.get("/ui/?status=suspended").text
    assert 'id="run-r-alice"' in page and 'id="run-r-bob"' not in page
    bad = browser.get("/ui/?status=exploded")
    assert bad.status_code == 400 and "status must be one of" in bad.text
    bad = browser.get("/ui/?since=yesterday-ish")
    assert bad.status_code == 400 and "since must be an ISO-8601 instant" in bad.text


def test_a_run_that_does_not_exist_or_cannot_exist_is_a_404_page(served: Served) -> None:
    browser = served.browser()
    assert browser.get("/ui/runs/nope").status_code == 404
    answer = browser.get("/ui/runs/" + quote("..%2F..%2Fetc", safe=""))
    assert answer.status_code == 404 and "a run id is 1-200 characters" in answer.text
    assert browser.get("/ui/elsewhere").status_code == 404


def test_a_run_page_shows_gates_locks_signals_events_and_params(served: Served) -> None:
    token = "tok-" + "9" * 30
    record = release(
        "r1",
        params={"version": "1.4.2"},
        locks={"env-staging": token, "zuke-run-r1": token + "-lease"},
        signals={"other": Signal(data={"by": "qa"}, received_at="2026-03-01T10:05:00.000Z")},
        events=(
            RunEvent(
                at="2026-03-01T10:06:00.000Z", tool="resume", actor="qa", args={"signal": "other"}
            ),
        ),
    )
    served.put(record)
    grant = served.api.post(
        "/locks/env-staging",
        json={
            "holder": {"actor": "alice", "runId": "r1", "since": "2026-03-01T10:00:00Z"},
            "ttlMs": 600000,
        },
    )
    page = served.browser().get("/ui/runs/r1").text
    assert "Waiting gates" in page and "the signal &#39;approved&#39;" in page
    assert "env-staging" in page and "the run&#39;s lease" in page
    assert "1.4.2" in page and "resume" in page and "&#34;by&#34;: &#34;qa&#34;" in page
    assert 'class="node s-waiting"' in page  # the graph's gate box
    for secret in (token, grant.json()["token"]):
        assert secret not in page  # a lock's token renews and releases it: never shown


def test_record_text_full_of_html_is_shown_as_text(served: Served) -> None:
    targets = dict(release("x").targets)
    targets[HOSTILE] = TargetRecord(
        status="failed", error=f"boom {HOSTILE}", meta={"note": HOSTILE}
    )
    record = release(
        "r-html",
        actor=HOSTILE,
        build=f"Build{HOSTILE}",
        params={"p": HOSTILE},
        signals={HOSTILE: Signal(data={HOSTILE: HOSTILE}, received_at="2026-03-01T10:00:00Z")},
        targets=targets,
        events=(
            RunEvent(at="x", tool=HOSTILE, actor=HOSTILE, args={HOSTILE: HOSTILE}, detail=HOSTILE),
        ),
    )
    served.put(record)
    browser = served.browser()
    for path in ("/ui/runs/r-html", "/ui/", f"/ui/?starter={quote(HOSTILE)}"):
        page = browser.get(path).text
        assert "<img" not in page, path
        assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in page, path


def test_bidi_and_control_characters_in_a_record_are_made_visible(served: Served) -> None:
    served.put(release("r-bidi", actor="eve\u202egnp.exe", build="B\x1b[31m"))
    page = served.browser().get("/ui/runs/r-bidi").text
    assert "\u202e" not in page and "\x1b" not in page
    assert "eve\\u202egnp.exe" in page and "B\\u001b[31m" in page


def test_only_http_links_from_a_record_become_links(served: Served) -> None:
    targets = dict(release("x").targets)
    targets["approve"] = TargetRecord(
        status="waiting",
        waiting_for=release("x").targets["approve"].waiting_for,
        meta={
            "issueUrl": "javascript:alert(1)",
            "runUrl": "https://github.com/a/b/actions/runs/7",
            "approvers": [{"login": "carol", "role": "admin", "url": "data:text/html,x"}],
        },
    )
    served.put(release("r-links", targets=targets))
    page = served.browser().get("/ui/runs/r-links").text
    assert 'href="https://github.com/a/b/actions/runs/7"' in page
    assert 'href="javascript:' not in page and 'href="data:' not in page
    assert "1 approval" in page and "carol" in page


def test_a_lock_held_until_a_later_target_names_the_gate_its_run_waits_at(served: Served) -> None:
    served.put(
        release(
            "r1",
            locks={"env-staging": "t"},
            held={"env-staging": HeldLock("build", "publish", 600000, 3)},
        )
    )
    holder = LockHolder(actor="alice", run_id="r1", since="2026-03-01T10:00:00Z")
    served.api.post(
        "/locks/env-staging",
        json={
            "holder": {"actor": holder.actor, "runId": holder.run_id, "since": holder.since},
            "ttlMs": 600000,
        },
    )
    page = served.browser().get("/ui/locks").text
    row = page.split("env-staging", 1)[1].split("</tr>", 1)[0]
    assert (
        "held until publish has finished" in row
        and "the run waits at <strong>approve</strong>" in row
    )
    assert 'href="/ui/runs/r1"' in row


def test_namespaces_are_kept_apart_and_in_every_link(served: Served) -> None:
    ns_api = httpx.Client(base_url=served.url + "/team-a", headers=served.api.headers)
    ns_api.put(
        "/runs/r-team", json=record_to_json(release("r-team")), headers={"If-None-Match": "*"}
    )
    ns_api.close()
    browser = served.browser()
    assert 'id="run-r-team"' not in browser.get("/ui/").text
    page = browser.get("/ui/?ns=team-a").text
    assert 'href="/ui/runs/r-team?ns=team-a"' in page
    assert browser.get("/ui/runs/r-team?ns=team-a").status_code == 200
    assert browser.get("/ui/?ns=../x").status_code == 400


def test_without_the_view_ui_is_an_ordinary_namespace_again(tmp_path: Path) -> None:
    with view_server(tmp_path, ui=False) as off:
        assert off.client().get("/ui/").status_code == 401  # the state API's bearer gate
        off.api.put(
            "/ui/runs/r1", json=record_to_json(release("r1")), headers={"If-None-Match": "*"}
        )
        assert off.api.get("/ui/runs/r1").status_code == 200


def test_a_read_only_token_without_a_write_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="READ_TOKEN is set, but --no-auth needs no token"):
        StateServer(db_path=tmp_path / "s.db", no_auth=True, read_token="r")


def test_without_a_token_the_view_asks_for_none(tmp_path: Path) -> None:
    with view_server(tmp_path, token=None, read_token=None, no_auth=True) as open_view:
        assert open_view.client().get("/ui/").status_code == 200
        assert open_view.client().get("/ui/login").status_code == 303


def test_a_corrupt_record_is_named_on_its_page_and_breaks_no_other(served: Served) -> None:
    import sqlite3

    served.put(release("r-ok"))
    served.put(release("r-base", status="running"))
    served.put(release("r-journal"))
    served.api.post("/locks/k1", json={"holder": {"actor": "a", "runId": "r-journal",
                                                  "since": "2026-03-01T10:00:00Z"},
                                       "ttlMs": 60000})  # fmt: skip
    db = sqlite3.connect(served.server._db_spec)
    with db:  # a foreign writer's damage: a record without its fields; a journal line likewise
        db.execute("UPDATE runs SET record = '{\"id\": 7}' WHERE id = 'r-base'")
        db.execute("INSERT INTO run_deltas (ns, run_id, seq, delta) VALUES"
                   " ('', 'r-journal', 99, '{\"status\": 5}')")  # fmt: skip
    db.close()
    browser = served.browser()
    runs = browser.get("/ui/")
    assert runs.status_code == 200 and 'id="run-r-ok"' in runs.text
    assert 'id="run-r-base"' in runs.text and 'id="run-r-journal"' in runs.text
    assert browser.get("/ui/locks").status_code == 200
    for run_id in ("r-base", "r-journal"):
        page = browser.get(f"/ui/runs/{run_id}")
        assert page.status_code == 200 and "This run's record cannot be read" in page.text


def test_the_no_ui_flag_of_a_real_zuke_serve_turns_the_view_off(tmp_path: Path) -> None:
    from tests.serve.support import running_server

    with running_server(tmp_path, args=("--no-ui",)) as off, httpx.Client(base_url=off.url) as raw:
        answer = raw.get("/ui/")
        assert answer.status_code == 401 and answer.json() == {"error": "unauthorized"}
    with running_server(tmp_path) as on, httpx.Client(base_url=on.url) as raw:
        assert raw.get("/ui/").headers["location"] == "/ui/login?next=%2Fui%2F"


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


def test_a_record_without_a_graph_lists_its_targets_and_says_so(served: Served) -> None:
    served.put(release("r-flat", graph=()))
    page = served.browser().get("/ui/runs/r-flat").text
    assert "The record has no graph" in page and "<svg" not in page
    assert 'id="t-0"' in page and "approve" in page


def test_rows_whose_record_was_not_read_say_where_to_look(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    from zuke._serve.ui import queries

    served.put(release("r1"))
    monkeypatch.setattr(queries, "READ_BUDGET_S", 0.0)
    row = served.browser().get("/ui/").text.split('id="run-r1"', 1)[1].split("</tr>", 1)[0]
    assert "open the run to see where it is" in row and "waits at" not in row
