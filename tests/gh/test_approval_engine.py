"""``github_approval`` in the engine (in-process, respx): a release suspends and its issue
appears without the secret, a maintainer's ``/approve`` resumes it on the next sweep, a
``/deny`` fails it, and a timeout says so on the issue and closes it before the rollback."""

from __future__ import annotations

from typing import Any

import pytest
import respx

from tests.gh._approval_support import SHA, Hub
from tests.gh.conftest import MakeClient
from tests.runs.support import HOUR, Harness, approval, release_build
from zuke._clock import ManualClock
from zuke.state.memory import MemoryStateStore
from zuke_gh import github_approval, read_approval

SECRET = "s3cret-token-value"


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain", alice="admin", reader="read", bob="maintain")
    return hub


def harness(make_client: MakeClient, calls: list[Any], **configure: Any) -> Harness:
    client = make_client()
    trigger = github_approval(
        lambda a: a.repo("acme/app").client(lambda: client).no_self_approval()
    )
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    build = release_build(store, calls, gate=approval(trigger, on_timeout="rollback"))
    return Harness(build, store, clock, env={"ZUKE_ACTOR": "alice"})


def test_an_approved_release_resumes_on_the_next_sweep_and_records_who(
    hub: Hub, make_client: MakeClient
) -> None:
    calls: list[Any] = []
    h = harness(make_client, calls)
    run = h.start(params={"token": [SECRET], "repo": ["web"]})
    assert run.status == "suspended"
    body = hub.issues[1]["body"]
    assert "`repo`: `web`" in body and SECRET not in body
    # the run's actor, recorded; ZUKE_ACTOR is a name GitHub never vouched for: the issue says so
    assert "except the GitHub login `alice`: the run was started under that name locally" in body

    hub.say(1, "alice", "/approve")  # the starter: refused under no_self_approval()
    hub.say(1, "reader", "/approve")
    report = h.sweep()
    assert [e.action for e in report.entries] == ["still-waiting"]
    hub.say(1, "maint", "/approve")
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [("resumed", "succeeded")]
    assert ("promote", None, "web") in calls
    approval_ = read_approval(h.record(run.run_id).targets["approve"].meta)
    assert approval_ is not None and [a.login for a in approval_.approvers] == ["maint"]
    # the run's audit trail says the same: who approved, in which role, where
    [passed] = [e for e in h.record(run.run_id).events if e.tool == "gate-passed"]
    assert passed.args == {"gate": "approve"} and passed.detail is not None
    assert passed.detail.startswith("approved by @maint (maintain) http")
    assert hub.issues[1]["state"] == "closed"
    assert SECRET not in str(hub.calls) + str(hub.comments)


def test_a_denied_release_fails_and_keeps_the_decision_in_its_record(
    hub: Hub, make_client: MakeClient
) -> None:
    calls: list[Any] = []
    h = harness(make_client, calls)
    run = h.start()
    hub.say(1, "bob", "/deny not this week")
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [("gate-failed", "failed")]
    assert "denied by @bob (maintain): not this week" in (report.entries[0].detail or "")
    record = h.record(run.run_id)
    assert record.targets["approve"].status == "failed"
    decided = read_approval(record.targets["approve"].meta)
    assert decided is not None and decided.denied_by is not None
    assert decided.denied_by.login == "bob"
    assert not any(c == ("promote", None, "api") for c in calls)


def test_a_timed_out_gate_says_so_on_the_issue_closes_it_and_rolls_back(
    hub: Hub, make_client: MakeClient
) -> None:
    calls: list[Any] = []
    h = harness(make_client, calls)
    h.start()
    h.clock.advance(73 * HOUR)
    report = h.sweep()
    assert [e.action for e in report.entries] == ["timed-out"]
    assert any(isinstance(c, tuple) and c[0] == "rollback" for c in calls)
    assert "The gate timed out" in hub.on(1)[-1]["body"]
    assert hub.issues[1]["state"] == "closed" and hub.issues[1]["state_reason"] == "not_planned"
