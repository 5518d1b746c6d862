"""``github_approval``'s cursor cannot be blinded: every comment created after the last one
judged is read, in id order, across pages — a burst within one second, edits and deletions
around it, a cursor GitHub no longer takes — and a thread with more new comments than one
check's budget is finished by the next checks, which say so."""

from __future__ import annotations

import pytest
import respx

from tests.gh._approval_support import BOT, GRAPHQL, SHA, Hub, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied
from zuke_gh import _approval_reads as reads

LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain", boss="admin", reader="read")
    return hub


def burst(hub: Hub, count: int, login: str = "spammer") -> None:
    """``count`` comments in one second of GitHub's clock (the same ``created_at``)."""
    second = hub.now + 1000
    for n in range(count):
        hub.now = second - 1000
        hub.say(1, login, f"+1 ({n})")


def replies(hub: Hub) -> list[str]:
    return [c["body"] for c in hub.on(1) if c["user"]["login"] == BOT]


def test_an_approve_after_a_burst_of_120_comments_in_one_second_is_read(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client()))
    burst(hub, 120)
    for n in range(2):  # two quiet sweeps after the burst, each a fresh process
        assert isinstance(probe.check(gate(make_client()), LATER + n * 60_000), NotYet)
    assert probe.meta["lastId"] == hub.on(1)[-1]["id"]
    hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER + 180_000), Satisfied)


def test_a_burst_and_an_approve_read_by_one_check_across_pages(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client()))
    burst(hub, 1000)
    hub.say(1, "maint", "/approve")
    calls = len(hub.calls)
    assert isinstance(probe.check(gate(make_client()), LATER), Satisfied)
    # 1,001 comments: 11 pages, each from the cursor the last one ended at
    assert hub.calls[calls:].count(GRAPHQL) == 11
    afters = [q["variables"]["after"] for q in hub.queries[-11:]]
    assert afters[0] is None and all(afters[1:]) and len(set(afters)) == 11


def test_more_new_comments_than_a_checks_budget_are_finished_by_the_next_checks(
    hub: Hub, make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reads, "READ_PAGES", 2)
    probe = Probe()
    probe.check(gate(make_client()))
    burst(hub, 450)
    hub.say(1, "maint", "/deny not this one")
    first = probe.check(gate(make_client()), LATER)
    assert isinstance(first, NotYet)
    assert "read 200 new comments (2 pages, this check's budget): more remain" in (
        first.reason or "")  # fmt: skip
    assert probe.meta["lastId"] == hub.on(1)[199]["id"]
    second = probe.check(gate(make_client()), LATER + 60_000)
    assert isinstance(second, NotYet) and "more remain" in (second.reason or "")
    third = probe.check(gate(make_client()), LATER + 120_000)
    assert not isinstance(third, (NotYet, Satisfied))  # the /deny decided
    assert probe.meta["decision"]["deniedBy"]["login"] == "maint"


def test_a_comment_deleted_after_it_was_judged_is_not_taken_back(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client(), lambda a: a.approvals(2)))
    said = hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(gate(make_client(), lambda a: a.approvals(2)), LATER), NotYet)
    hub.delete(said["id"])  # the cursor's own comment is gone: reading goes on after it
    hub.say(1, "boss", "/approve")
    answer = probe.check(gate(make_client(), lambda a: a.approvals(2)), LATER + 60_000)
    assert isinstance(answer, Satisfied)
    assert [a["login"] for a in probe.meta["decision"]["approvers"]] == ["maint", "boss"]


def test_an_edit_never_brings_a_judged_comment_back_and_an_unread_one_counts_as_it_reads_now(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client()))
    first = hub.say(1, "reader", "/approve")
    probe.check(gate(make_client()), LATER)
    assert len(replies(hub)) == 1  # one reply: the role is missing
    hub.edit(first["id"], "/approve\nreally")  # judged already: never read again
    later = hub.say(1, "maint", "lgtm")
    hub.edit(later["id"], "/approve")  # edited before any check read it: read as it is now
    assert isinstance(probe.check(gate(make_client()), LATER + 60_000), Satisfied)
    assert len(replies(hub)) == 2  # the reply, then the closing comment: no second reply


def test_a_cursor_github_no_longer_takes_reads_from_the_start_skipping_what_was_judged(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client()))
    hub.say(1, "reader", "/approve")
    probe.check(gate(make_client()), LATER)
    hub.stale_cursors.add(probe.meta["cursor"])
    hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER + 60_000), Satisfied)
    assert [q["variables"]["after"] for q in hub.queries[-2:]][1] is None
    assert len([r for r in replies(hub) if r.startswith("Thank you")]) == 1  # not twice


def test_a_bot_named_like_a_maintainer_is_judged_as_the_bot(
    hub: Hub, make_client: MakeClient
) -> None:
    # GraphQL spells an App's bot without "[bot]": "maint" would pass for the maintainer.
    probe = Probe()
    probe.check(gate(make_client()))
    hub.say(1, "maint[bot]", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER), NotYet)
    assert replies(hub) == ["Thank you, @maint[bot]. Your `/approve` did not count: approving or "
                            "denying this release needs the `write` role or higher on "
                            "`acme/app`, and yours is `none`."]  # fmt: skip
    assert "GET /repos/acme/app/collaborators/maint/permission" not in hub.calls


def test_a_named_threads_earlier_comments_never_count(hub: Hub, make_client: MakeClient) -> None:
    hub.add_issue(42)
    for n in range(150):
        hub.say(42, "maint", f"/approve {n}")  # all before the gate asked
    probe = Probe()
    probe.check(gate(make_client(), lambda a: a.on_issue(42)))
    assert isinstance(probe.check(gate(make_client(), lambda a: a.on_issue(42)), LATER), NotYet)
    assert probe.meta["lastId"] == probe.meta["requestId"]
    hub.say(42, "boss", "/approve")
    passed = probe.check(gate(make_client(), lambda a: a.on_issue(42)), LATER + 60_000)
    assert isinstance(passed, Satisfied)
    assert [a["login"] for a in probe.meta["decision"]["approvers"]] == ["boss"]


def test_a_record_from_before_the_cursor_judges_nothing_twice(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client()))
    old = hub.say(1, "reader", "/approve")
    probe.meta.update(seen=[old["id"]], since="2023-11-14T22:00:00Z", etag='W/"x"')
    hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER), Satisfied)
    assert not [r for r in replies(hub) if r.startswith("Thank you")]  # old: not judged again
    assert {"seen", "since", "etag"}.isdisjoint(probe.meta)
