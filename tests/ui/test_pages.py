"""The web view's pages over HTTP: what they show, and that record text stays text.

A ``zuke serve`` on a thread; the browser's side is ``tests/ui/browser``.
"""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.ui.support import (
    HOSTILE,
    Served,
    release,
)
from zuke.state.records import HeldLock, LockHolder, RunEvent, Signal, TargetRecord
from zuke.state.wire import record_to_json


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
