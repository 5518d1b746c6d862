"""The release dashboard on the fake GitHub: found only among zuke's own, at most one write a
sweep, none when nothing changed, hostile values inert, pinned when the token may."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from markdown_it import MarkdownIt

from fixtures.fake_github import FakeGitHub
from zuke._clock import ManualClock, iso
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord, TargetRecord, WaitingFor
from zuke_gh import GitHubClient
from zuke_gh._dashboard_view import STAMP, marker
from zuke_gh.dashboard import keep_dashboard, main

REPO = "acme/app"
SERVER = "https://github.com"
START = 1_800_000_000_000
RENDER = MarkdownIt("commonmark", {"html": True}).enable("table")
EDIT = "PATCH /repos/{owner}/{repo}/issues/{number}"
OPEN = "POST /repos/{owner}/{repo}/issues"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(START), repos=[REPO]) as fake:
        fake.add_user("mallory")
        fake.set_permission(REPO, "mallory", "triage")  # may label anything
        yield fake


@pytest.fixture
def client(gh: FakeGitHub) -> Iterator[GitHubClient]:
    with GitHubClient(token=gh.token, base_url=gh.url, pacer=None) as made:
        yield made


def waiting(run_id: str, *, params: dict[str, str] | None = None, issue: int = 7,
            detail: str = "github_approval acme/app#7: 0 of 2 approvals; waiting for /approve "
            "from maintain or higher") -> RunRecord:  # fmt: skip
    at = iso(START)
    why = WaitingFor(trigger=f"github-approval:{REPO}", deadline=iso(START + 3_600_000),
                     detail=detail)  # fmt: skip
    gate = TargetRecord(status="waiting", started_at=at, meta={"repo": REPO, "issue": issue},
                        waiting_for=why)  # fmt: skip
    return RunRecord(id=run_id, build="Release", root_target="promote", status="suspended",
                     actor="alice", created_at=at, updated_at=at,
                     params=params or {"version": "1.2.3"},
                     targets={"staging": TargetRecord(status="succeeded"), "qa": gate})  # fmt: skip


def finished(run_id: str, status: str = "succeeded") -> RunRecord:
    at = iso(START + 60_000)
    return RunRecord(id=run_id, build="Release", root_target="promote", status=status,  # type: ignore[arg-type]
                     actor="alice", created_at=at, updated_at=at)  # fmt: skip


def store_of(*records: RunRecord) -> MemoryStateStore:
    store = MemoryStateStore()
    for r in records:
        store.create_run(r)
    return store


def keep(store: MemoryStateStore, client: GitHubClient, **options: Any) -> Any:
    options.setdefault("clock", ManualClock(START))
    return keep_dashboard(store, client, REPO, server=SERVER,
                          job_url=f"{SERVER}/{REPO}/actions/runs/99", **options)  # fmt: skip


def dashboards(gh: FakeGitHub) -> list[dict[str, Any]]:
    return [i for i in gh.issues(REPO) if marker(REPO) in (i["body"] or "")]


def writes(gh: FakeGitHub) -> list[str]:
    return [r["endpoint"] for r in gh.requests if r["method"] != "GET"]


def rendered_outside_code(markdown: str) -> str:
    return re.sub(r"<code>.*?</code>", "<code/>", RENDER.render(markdown), flags=re.S)


def test_a_waiting_release_is_listed_then_drops_off_when_it_finishes(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    store = store_of(waiting("r-1"))
    done = keep(store, client)
    assert (done.action, done.writes, done.waiting, done.note) == ("created", 2, 1, "pinned")
    (board,) = dashboards(gh)
    assert (
        board["labels"] == ["zuke"] and board["pinned"] and board["user"] == "github-actions[bot]"
    )
    body = board["body"]
    assert "`r-1`" in body and "`qa`" in body and "`version=1.2.3`" in body
    assert "0 of 2 approvals" in body and f"]({SERVER}/{REPO}/issues/7)" not in body
    assert f"(<{SERVER}/{REPO}/issues/7>)" in body  # the approval issue, linked
    assert body.rstrip().splitlines()[-1].endswith(STAMP)
    assert "actions/runs/99" in body
    # the release finishes: the next sweep drops it and lists it as finished, in one edit
    stored = store.get_run("r-1")
    assert stored is not None
    store.put_run(finished("r-1"), expected_version=stored.version)
    gh.reset_stats()
    done = keep(store, client)
    assert (done.action, done.writes, done.waiting) == ("edited", 1, 0)
    assert writes(gh) == [EDIT]
    body = dashboards(gh)[0]["body"]
    assert "Nothing is waiting." in body and "| `r-1` |" in body and "succeeded" in body


def test_fifty_waiting_runs_are_one_edit_a_sweep_at_most_and_none_when_nothing_changed(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    store = store_of(*(waiting(f"r-{n:02d}", issue=n + 1) for n in range(50)))
    assert keep(store, client).action == "created"
    for _ in range(3):  # later sweeps, nothing new: no write at all (the date does not count)
        gh.reset_stats()
        assert keep(store, client, clock=ManualClock(START + 900_000)).action == "unchanged"
        assert writes(gh) == []
    gh.reset_stats()
    store.create_run(waiting("r-50", issue=99))  # one more waits: one edit
    done = keep(store, client)
    assert (done.action, done.waiting) == ("edited", 51)
    assert writes(gh) == [EDIT]
    assert len(dashboards(gh)) == 1 and "`r-50`" in dashboards(gh)[0]["body"]


def test_a_copy_by_someone_else_is_never_adopted(gh: FakeGitHub, client: GitHubClient) -> None:
    copy = gh.open_issue(REPO, "zuke: releases waiting", login="mallory", labels=["zuke"],
                         body=f"{marker(REPO)}\nfake: approve r-evil here")  # fmt: skip
    store = store_of(waiting("r-1"))
    done = keep(store, client)
    assert done.action == "created" and done.number != copy
    gh.reset_stats()
    assert keep(store, client).number == done.number  # its own, found again; the copy untouched
    assert writes(gh) == []
    (kept,) = [i["body"] for i in gh.issues(REPO) if i["number"] == copy]
    assert kept.endswith("r-evil here")


def test_a_closed_or_unlabelled_dashboard_is_put_right_in_one_edit(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    store = store_of(waiting("r-1"))
    number = keep(store, client).number
    gh.add_user("maint")
    gh.set_permission(REPO, "maint", "maintain")
    with GitHubClient(token=gh.add_user_token("maint"), base_url=gh.url, pacer=None) as maint:
        maint.patch("/repos/acme/app/issues/{number}", number=number,
                    json={"state": "closed", "labels": ["release"]})  # fmt: skip
    gh.reset_stats()
    assert keep(store, client).action == "edited"
    (board,) = dashboards(gh)
    assert board["state"] == "open" and sorted(board["labels"]) == ["release", "zuke"]
    assert writes(gh) == [EDIT]


HOSTILE = ("@maint <img src=x onerror=alert(1)> [click](https://evil.example) #1 **bold** "
           "`tick` | cell\nnew line <!-- zuke-dashboard-swept --> ::error::x")  # fmt: skip


def test_hostile_parameters_and_gate_words_are_inert_and_secrets_masked(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    secret = "s3cret-deploy-token-4711"
    store = store_of(waiting("r-1", params={"title": HOSTILE, "url": f"https://u:{secret}@h"},
                             detail=HOSTILE))  # fmt: skip

    def mask(text: str) -> str:
        return text.replace(secret, "[redacted]")

    keep(store, client, redact=mask)
    body = dashboards(gh)[0]["body"]
    assert secret not in body and "[redacted]" in body
    outside = rendered_outside_code(body)
    for bad in ("@maint", "<img", "evil.example", "#1", "<strong>"):
        assert bad not in outside, bad
    # the stamp cannot be faked from inside: nothing changes on the next sweep
    gh.reset_stats()
    assert keep(store, client, redact=mask).action == "unchanged" and writes(gh) == []


def test_a_refused_pin_is_said_not_an_error(gh: FakeGitHub, client: GitHubClient) -> None:
    for n in range(3):
        gh.open_issue(REPO, f"pinned {n}", login="mallory")
    for issue in gh.issues(REPO):
        client.graphql("mutation($id: ID!) { pinIssue(input: {issueId: $id}) { issue { id } } }",
                       {"id": client.get(f"/repos/acme/app/issues/{issue['number']}").body[
                           "node_id"]})  # fmt: skip
    done = keep(store_of(waiting("r-1")), client)
    assert done.action == "created" and done.note.startswith("not pinned: ")
    assert not dashboards(gh)[0]["pinned"]


def test_a_spent_write_budget_defers_the_edit_to_a_later_sweep(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    store = store_of(waiting("r-1"))
    keep(store, client)
    store.create_run(waiting("r-2"))

    class Spent(MemoryStateStore):
        def reserve_writes(self, writes: int) -> bool:
            return False

    spent = Spent()
    for run_id in ("r-1", "r-2"):
        found = store.get_run(run_id)
        assert found is not None
        spent.create_run(found.record)
    gh.reset_stats()
    done = keep(spent, client)
    assert done.action == "deferred" and "budget" in done.note and writes(gh) == []
    assert keep(store, client).action == "edited"


def test_off_by_the_environment_and_bad_settings_are_one_line(
    capsys: pytest.CaptureFixture[str], gh: FakeGitHub, tmp_path: Any
) -> None:
    env = {"GITHUB_API_URL": gh.url, "GH_TOKEN": gh.token, "GITHUB_REPOSITORY": REPO,
           "ZUKE_STATE_DIR": str(tmp_path)}  # fmt: skip
    assert main({**env, "ZUKE_DASHBOARD": "false"}) == 0
    assert capsys.readouterr().out == "zuke: dashboard: off (ZUKE_DASHBOARD)\n"
    assert gh.issues(REPO) == []
    assert main({**env, "ZUKE_DASHBOARD_FINISHED": "many"}) == 2
    err = capsys.readouterr().err
    assert err.startswith("zuke: dashboard: ZUKE_DASHBOARD_FINISHED=many") and err.count("\n") == 1
    assert main({**env, "GITHUB_REPOSITORY": ""}) == 2
    assert "GITHUB_REPOSITORY" in capsys.readouterr().err
    gh.set_token(gh.token, permissions={"issues": "read", "metadata": "read"})
    assert main(env) == 1
    err = capsys.readouterr().err
    assert "issues: write" in err and gh.token not in err and gh.issues(REPO) == []


def _gate(trigger: str, detail: str, meta: dict[str, Any]) -> RunRecord:
    why = WaitingFor(trigger=trigger, detail=detail)
    at = iso(START)
    gate = TargetRecord(status="waiting", started_at=at, waiting_for=why, meta=meta)
    return RunRecord(id="r-9", build="Release", root_target="ship", status="suspended",
                     actor="alice", created_at=at, updated_at=at, targets={"g": gate})  # fmt: skip


def test_what_each_kind_of_gate_waits_for_and_only_links_built_from_checked_parts() -> None:
    from zuke_gh._dashboard_view import waiting_gates

    [signal] = waiting_gates(_gate("signal:approved", "waiting for the signal 'approved'", {}),
                             SERVER)  # fmt: skip
    assert (signal.trigger, signal.detail, signal.links) == (
        "signal:approved",
        "waiting for the signal 'approved'",
        (),
    )
    run_url = f"{SERVER}/{REPO}/actions/runs/4242"
    [flow] = waiting_gates(_gate("github:acme/app:e2e.yml", "waited 300 s for run 4242",
                                 {"runId": 4242, "runUrl": run_url}), SERVER)  # fmt: skip
    assert flow.detail is None  # its words count time: the page would change every sweep
    assert flow.links == (("workflow run 4242", run_url),)
    [elsewhere] = waiting_gates(_gate("github:acme/app:e2e.yml", "", {
        "runId": 4242, "runUrl": "https://evil.example/acme/app/actions/runs/4242",
        "repo": "acme/app\nx", "issue": 3}), SERVER)  # fmt: skip
    assert elsewhere.links == ()  # a recorded URL on another host, a slug that is none


def test_a_body_past_githubs_limit_keeps_the_first_rows_and_counts_the_rest() -> None:
    from zuke_gh._dashboard_view import content, waiting_gates

    long = {f"p{n}": "x" * 200 for n in range(8)}
    gates = [g for n in range(400) for g in waiting_gates(waiting(f"r-{n:03d}", params=long),
                                                          SERVER)]  # fmt: skip
    text = content(REPO, gates, [], lambda t: t)
    assert len(text) < 65_536 and "`r-000`" in text and "`r-399`" not in text
    shown = text.count("| `r-")
    assert f"\n{400 - shown} more: `zuke runs list --status suspended`\n" in text


def test_zukes_own_approval_issue_quoting_the_marker_is_not_taken_for_the_dashboard(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    quoted = "<!-- zuke-approval run=r-7 gate=qa commit=abc -->\nparams: `" + marker(REPO) + "`"
    approval = client.post("/repos/acme/app/issues", json={"title": "zuke: approve qa",
                                                           "body": quoted}).body  # fmt: skip
    hostile = {"note": f"{marker(REPO)} <!-- zuke-approval run=r-7 gate=qa commit=abc -->"}
    done = keep(store_of(waiting("r-1", params=hostile)), client)
    assert done.action == "created" and done.number != approval["number"]
    body = dashboards(gh)[-1]["body"]
    assert body.startswith(marker(REPO)) and body.count("<!--") == 2  # its marker, its stamp
    assert [i["body"] for i in gh.issues(REPO) if i["number"] == approval["number"]] == [quoted]


def test_a_lost_answer_to_opening_it_is_found_by_the_next_sweep_not_opened_twice(
    gh: FakeGitHub, client: GitHubClient
) -> None:
    from zuke_gh.errors import GitHubError, transient

    store = store_of(waiting("r-1"))
    gh.inject(OPEN, status=502, after=True)  # GitHub made the issue; its answer is lost
    with pytest.raises(GitHubError) as lost:
        keep(store, client)
    assert transient(lost.value)
    assert len(dashboards(gh)) == 1 and [r["endpoint"] for r in gh.requests].count(OPEN) == 1
    gh.reset_stats()
    done = keep(store, client)  # found by its marker and author: adopted, nothing opened
    assert done.action in ("unchanged", "edited") and OPEN not in writes(gh)
    assert len(dashboards(gh)) == 1
