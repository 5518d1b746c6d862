"""``github_approval``: reading the thread — one request per check from the gate's cursor, who
may decide (``role_name``, allow-lists, the starter), one reply to a command that did not
count, distinct approvers, ``/deny``, and a decision nothing afterwards changes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import respx

from tests.gh._approval_support import GRAPHQL, SHA, Hub, Killed, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied, WaitFailed, WaitTrigger
from zuke_gh import Approval, Approver, read_approval
from zuke_gh._approval_settings import ApprovalSettings

REPLY = "POST /repos/acme/app/issues/1/comments"
LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(reader="read", writer="write", maint="maintain", boss="admin")
    hub.roles.update(starter="admin", triager="triage", custom=("release-manager", "write"))
    hub.roles.update(lead="maintain")
    return hub


def opened(
    hub: Hub, make_client: MakeClient, configure: Callable[[ApprovalSettings], Any] | None = None
) -> tuple[Probe, WaitTrigger]:
    probe = Probe()
    trigger = gate(make_client(), configure)
    assert isinstance(probe.check(trigger), NotYet)
    assert list(hub.issues) == [1]
    return probe, trigger


def replies(hub: Hub) -> list[str]:
    """The gate's replies on the issue (not its closing comment)."""
    return [
        c["body"]
        for c in hub.on(1)
        if c["user"]["login"] == "github-actions[bot]" and not c["body"].startswith("<!--")
    ]


def test_a_quiet_check_is_one_request_from_the_cursor_even_from_a_fresh_client(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, _ = opened(hub, make_client)
    hub.say(1, "reader", "looks fine to me")  # not a command: no reply, nothing counted
    probe.check(gate(make_client()), LATER)
    assert probe.meta["cursor"] and probe.meta["lastId"] == hub.on(1)[-1]["id"]
    before = dict(probe.meta)
    calls = len(hub.calls)
    # A sweep in a new process: a fresh client (a fresh token: no ETag would match), the cursor
    # in the gate's state: one page, empty, and nothing written.
    answer = probe.check(gate(make_client()), LATER + 60_000)
    again = probe.check(gate(make_client()), LATER + 120_000)
    assert hub.calls[calls:] == [GRAPHQL, GRAPHQL]
    assert [q["variables"]["after"] for q in hub.queries[-2:]] == [before["cursor"]] * 2
    assert isinstance(answer, NotYet) and answer == again
    assert probe.meta == before  # nothing new writes nothing: a quiet sweep commits nothing
    assert replies(hub) == []


def test_a_read_only_users_approve_gets_one_polite_reply_recorded_before_it_is_sent(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client)
    said = hub.say(1, "reader", "/approve", author_association="OWNER")
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, NotYet) and "0 of 1 approvals" in (answer.reason or "")
    assert replies(hub) == [
        "Thank you, @reader. Your `/approve` did not count: approving or denying this release "
        "needs the `write` role or higher on `acme/app`, and yours is `read`."
    ]  # author_association OWNER is not a permission: the role decides
    assert probe.durable["lastId"] == said["id"]
    assert probe.events[-1] == "persist"  # the cursor was durable before the reply went out
    # The same comment, read again (an edit, a later check), is never answered twice.
    hub.edit(said["id"], "/approve\nplease")
    probe.check(trigger, LATER + 60_000)
    assert len(replies(hub)) == 1 and "decision" not in probe.meta


def test_a_crash_after_the_reply_never_sends_it_twice(hub: Hub, make_client: MakeClient) -> None:
    probe, trigger = opened(hub, make_client)
    hub.say(1, "reader", "/approve")
    hub.kill_after_post = True
    with pytest.raises(Killed):
        probe.check(trigger, LATER)
    probe.crash()
    probe.check(gate(make_client()), LATER + 60_000)
    assert len(replies(hub)) == 1


def test_a_writers_approve_satisfies_the_gate_closes_the_issue_and_reads_back(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client)
    said = hub.say(1, "writer", "/approve LGTM")
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, Satisfied)
    assert probe.durable["decision"]["approved"] is True  # durable before the closing comment
    closing = hub.on(1)[-1]["body"]
    assert closing.startswith("<!-- zuke-approval-closed run=run-1 gate=qa -->")
    assert "Approved by @writer (write)" in closing
    assert hub.issues[1]["state"] == "closed" and hub.issues[1]["state_reason"] == "completed"
    assert probe.meta["closed"] is True
    assert read_approval(probe.meta) == Approval(
        approved=True,
        approvers=[Approver("writer", "write", said["html_url"], said["created_at"])],
    )


def test_read_approval_is_none_before_the_decision(hub: Hub, make_client: MakeClient) -> None:
    probe, _ = opened(hub, make_client)
    assert read_approval(probe.meta) is None


def test_two_approvals_need_two_distinct_logins(hub: Hub, make_client: MakeClient) -> None:
    probe, trigger = opened(hub, make_client, lambda a: a.approvals(2))
    hub.say(1, "writer", "/approve")
    hub.say(1, "Writer", "/approve")  # logins are case-insensitive: the same person
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, NotYet) and "1 of 2 approvals (@writer)" in (answer.reason or "")
    assert replies(hub) == [
        "Thank you, @Writer. Your `/approve` did not count: your approval is already counted; "
        "1 more, by someone else, is needed."
    ]
    hub.say(1, "boss", "/approve")
    assert isinstance(probe.check(trigger, LATER + 60_000), Satisfied)
    assert [a.login for a in read_approval(probe.meta).approvers] == ["writer", "boss"]  # type: ignore[union-attr]
    assert [a.role for a in read_approval(probe.meta).approvers] == ["write", "admin"]  # type: ignore[union-attr]


def test_no_self_approval_refuses_the_starters_approve_but_lets_them_deny(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client, lambda a: a.no_self_approval())
    hub.say(1, "Starter", "/approve")
    assert isinstance(probe.check(trigger, LATER), NotYet)
    assert "cannot approve it (`no_self_approval()`)" in replies(hub)[0]
    hub.say(1, "starter", "/deny wrong build")
    answer = probe.check(trigger, LATER + 60_000)
    assert isinstance(answer, WaitFailed)
    assert answer.reason.endswith("denied by @starter (admin): wrong build")


def test_without_no_self_approval_the_starter_may_approve(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client)
    hub.say(1, "starter", "/approve")
    assert isinstance(probe.check(trigger, LATER), Satisfied)


def test_a_deny_from_an_allowed_user_fails_the_gate_with_the_reason_and_the_user(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client, lambda a: a.approvals(2))
    hub.say(1, "writer", "/approve")
    denied = hub.say(1, "maint", "/deny the smoke tests are red")
    hub.say(1, "boss", "/approve")  # after the decision: never read
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, WaitFailed)
    assert answer.reason == (
        "github_approval acme/app#1: denied by @maint (maintain): the smoke tests are red"
    )
    approval = read_approval(probe.meta)
    assert approval is not None and approval.approved is False
    assert approval.denied_by == Approver(
        "maint", "maintain", denied["html_url"], denied["created_at"]
    )
    assert approval.reason == "the smoke tests are red"
    assert [a.login for a in approval.approvers] == ["writer"]
    assert hub.issues[1]["state_reason"] == "not_planned"
    assert "Denied by @maint (maintain)" in hub.on(1)[-1]["body"]


def test_a_deny_reason_may_be_on_the_lines_below(hub: Hub, make_client: MakeClient) -> None:
    probe, trigger = opened(hub, make_client)
    hub.say(1, "writer", "/deny\r\nthe changelog is missing")
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, WaitFailed) and answer.reason.endswith("the changelog is missing")


def test_nothing_after_the_decision_changes_it_and_no_call_is_made(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client)
    said = hub.say(1, "writer", "/approve")
    first = probe.check(trigger, LATER)
    assert isinstance(first, Satisfied)
    hub.edit(said["id"], "/deny changed my mind")
    hub.say(1, "boss", "/deny too late")
    calls = len(hub.calls)
    again = probe.check(gate(make_client()), LATER + 60_000)
    assert again == first and hub.calls[calls:] == []


def test_a_comment_edited_into_a_command_after_it_was_read_does_not_count(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client)
    said = hub.say(1, "writer", "I will look at it tomorrow")
    probe.check(trigger, LATER)
    hub.edit(said["id"], "/approve")
    answer = probe.check(trigger, LATER + 60_000)
    assert isinstance(answer, NotYet) and replies(hub) == []


@pytest.mark.parametrize(
    "body", ["please /approve", "/approved", "/approveit", "> /approve", "`/approve`"]
)
def test_only_a_first_line_that_is_the_command_counts(
    hub: Hub, make_client: MakeClient, body: str
) -> None:
    probe, trigger = opened(hub, make_client)
    hub.say(1, "writer", body)
    assert isinstance(probe.check(trigger, LATER), NotYet)
    assert replies(hub) == []


def test_a_command_on_another_runs_issue_never_counts(hub: Hub, make_client: MakeClient) -> None:
    probe, trigger = opened(hub, make_client)
    hub.add_issue(2, "<!-- zuke-approval run=run-2 gate=qa commit=x -->")
    hub.say(2, "boss", "/approve")
    assert isinstance(probe.check(trigger, LATER), NotYet)
    assert "GET /repos/acme/app/issues/2/comments" not in hub.calls


def test_a_higher_role_is_needed_when_set_and_triage_is_below_write(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client, lambda a: a.role("maintain"))
    hub.say(1, "triager", "/approve")
    hub.say(1, "writer", "/approve")
    assert isinstance(probe.check(trigger, LATER), NotYet)
    assert len(replies(hub)) == 2 and "needs the `maintain` role" in replies(hub)[1]
    hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(trigger, LATER + 60_000), Satisfied)


def test_a_custom_role_built_on_maintain_passes_a_maintain_gate(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.roles.update(rm=("release-manager", "maintain"))  # legacy `permission`: write
    probe, trigger = opened(hub, make_client, lambda a: a.role("maintain"))
    hub.say(1, "rm", "/approve")
    assert isinstance(probe.check(trigger, LATER), Satisfied)
    assert read_approval(probe.meta).approvers[0].role == "maintain"  # type: ignore[union-attr]


def test_a_custom_role_counts_by_its_base_permission(hub: Hub, make_client: MakeClient) -> None:
    probe, trigger = opened(hub, make_client)
    hub.say(1, "custom", "/approve")
    assert isinstance(probe.check(trigger, LATER), Satisfied)
    assert read_approval(probe.meta).approvers[0].role == "write"  # type: ignore[union-attr]


def test_the_users_allow_list_refuses_others_even_with_the_role(
    hub: Hub, make_client: MakeClient
) -> None:
    probe, trigger = opened(hub, make_client, lambda a: a.users("@Lead"))
    hub.say(1, "boss", "/approve")
    assert isinstance(probe.check(trigger, LATER), NotYet)
    assert replies(hub)[0].endswith("only @lead may decide on this release.")
    hub.say(1, "reader", "/approve")  # listed or not, the role is needed too
    hub.say(1, "lead", "/approve")
    assert isinstance(probe.check(trigger, LATER + 60_000), Satisfied)


def test_a_team_counts_its_active_members_asked_once_per_sweep(
    hub: Hub, make_client: MakeClient
) -> None:
    hub.teams["acme/release"] = {"writer": "pending", "maint": "active"}
    probe, trigger = opened(hub, make_client, lambda a: a.teams("acme/release").approvals(2))
    hub.say(1, "writer", "/approve")  # invited, not yet a member
    hub.say(1, "maint", "/approve")
    hub.say(1, "maint", "/approve")
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, NotYet) and "1 of 2 approvals (@maint)" in (answer.reason or "")
    assert "only @acme/release may decide" in replies(hub)[0]
    assert hub.count("GET /orgs/acme/teams/release/memberships/maint") == 1
    assert hub.count("GET /repos/acme/app/collaborators/maint/permission") == 1
