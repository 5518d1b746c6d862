"""``github_approval``: closing after the decision — once, even across a crash, and never a
reason to hold the release."""

from __future__ import annotations

import asyncio

import pytest
import respx

from tests.gh._approval_support import SHA, Hub, Killed, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied
from zuke._errors import AlreadyResumedError
from zuke_gh import RetryPolicy

LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(writer="write")
    return hub


def closings(hub: Hub) -> list[str]:
    return [c["body"] for c in hub.on(1) if c["body"].startswith("<!-- zuke-approval-closed")]


def test_a_crash_after_the_closing_comment_finds_it_and_only_closes_the_issue(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    assert isinstance(probe.check(gate(make_client())), NotYet)
    hub.say(1, "writer", "/approve")
    hub.kill_after_post = True  # the closing comment lands; its answer never comes back
    with pytest.raises(Killed):
        probe.check(gate(make_client()), LATER)
    probe.crash()
    assert probe.meta["decision"]["approved"] is True and "closed" not in probe.meta

    answer = probe.check(gate(make_client()), LATER + 60_000)
    assert isinstance(answer, Satisfied)
    assert len(closings(hub)) == 1 and hub.issues[1]["state"] == "closed"
    assert probe.meta["closed"] is True


def decided_then_killed(hub: Hub, make_client: MakeClient) -> Probe:
    """A gate whose approval was decided (durably), then killed before its closing comment."""
    probe = Probe()
    probe.check(gate(make_client()))
    hub.say(1, "writer", "/approve")
    hub.fail_post = Killed("killed before the closing comment left")
    with pytest.raises(Killed):
        probe.check(gate(make_client()), LATER)
    probe.crash()
    hub.fail_post = None
    return probe


def test_a_crash_before_the_closing_comment_sends_it_once_later(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = decided_then_killed(hub, make_client)
    assert isinstance(probe.check(gate(make_client()), LATER + 60_000), Satisfied)
    assert len(closings(hub)) == 1 and hub.issues[1]["state"] == "closed"


def test_a_closing_github_refuses_is_recorded_and_the_release_goes_on(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    trigger = gate(make_client(retry=RetryPolicy(max_attempts=1)))
    probe.check(trigger)
    hub.say(1, "writer", "/approve")
    hub.fail_post = 403
    answer = probe.check(trigger, LATER)
    assert isinstance(answer, Satisfied)
    assert "403" in probe.meta["closeError"] and hub.issues[1]["state"] == "open"
    calls = len(hub.calls)
    assert isinstance(probe.check(trigger, LATER + 60_000), Satisfied)
    assert hub.calls[calls:] == []  # tried once: the record says why it is still open


def test_a_check_that_finds_the_closing_owed_takes_the_run_before_saying_a_word(
    hub: Hub, make_client: MakeClient
) -> None:
    # Two sweeps at once: one decides and closes under the run's lease; the other reads the
    # durable decision with the closing still owed. It must take the run (persist) before
    # any request, and a refusal there (the run is held) leaves GitHub alone.
    probe = decided_then_killed(hub, make_client)
    calls = len(hub.calls)

    async def held() -> None:
        raise AlreadyResumedError("run run-1 is held by another process", run_id="run-1")

    ctx = probe.context(LATER + 60_000)
    ctx._persist = held
    with pytest.raises(AlreadyResumedError):
        asyncio.run(gate(make_client()).check(ctx))  # type: ignore[arg-type]
    assert hub.calls[calls:] == [] and closings(hub) == []
    assert isinstance(probe.check(gate(make_client()), LATER + 60_000), Satisfied)
    assert len(closings(hub)) == 1 and hub.issues[1]["state"] == "closed"
