"""``no_self_approval()`` judges by the run's recorded starter (``ctx.actor``), in whatever
process the gate is checked — never by the process's own actor — case-insensitively; a name
given locally is refused as a login too, and the issue says GitHub never vouched for it."""

from __future__ import annotations

import pytest
import respx

from tests.gh._approval_support import BOT, SHA, Hub, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied

LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    # the sweeping process's own actor: a bot, never the starter
    monkeypatch.setenv("GITHUB_ACTOR", "github-actions[bot]")
    monkeypatch.setenv("ZUKE_ACTOR", "release-bot")
    hub = Hub(router)
    hub.roles.update(alice="admin", maint="maintain")
    return hub


def no_self(hub: Hub, make_client: MakeClient, probe: Probe) -> None:
    probe.check(gate(make_client(), lambda a: a.no_self_approval()))


def check(probe: Probe, make_client: MakeClient, at: int) -> object:
    return probe.check(gate(make_client(), lambda a: a.no_self_approval()), at)


def reply(hub: Hub) -> str:
    said: str = [c["body"] for c in hub.on(1) if c["user"]["login"] == BOT][-1]
    return said


def test_the_starters_approve_is_refused_whoever_sweeps(hub: Hub, make_client: MakeClient) -> None:
    probe = Probe(actor="alice")
    no_self(hub, make_client, probe)
    assert probe.meta["starter"] == "alice" and probe.meta["starterSource"] == "github"
    assert "except @alice, who started the run" in hub.issues[1]["body"]
    hub.say(1, "ALICE", "/approve")  # logins are case-insensitive
    assert isinstance(check(probe, make_client, LATER), NotYet)
    assert "cannot approve it (`no_self_approval()`)" in reply(hub)
    hub.say(1, "maint", "/approve")
    assert isinstance(check(probe, make_client, LATER + 60_000), Satisfied)


def test_the_recorded_starter_wins_over_an_earlier_checks_copy(
    hub: Hub, make_client: MakeClient
) -> None:
    # A record from before the starter was kept for good: the gate's state says a bot started
    # it (the sweep that first reached the gate). The run's own starter decides now.
    probe = Probe(actor="alice")
    no_self(hub, make_client, probe)
    probe.meta["starter"] = "github-actions[bot]"
    hub.say(1, "alice", "/approve")
    assert isinstance(check(probe, make_client, LATER), NotYet)
    assert "cannot approve it" in reply(hub)


def test_a_local_starters_name_is_refused_as_a_login(hub: Hub, make_client: MakeClient) -> None:
    probe = Probe(actor="alice", source="local")
    no_self(hub, make_client, probe)
    body = hub.issues[1]["body"]
    assert "except the GitHub login `alice`: the run was started under that name locally" in body
    hub.say(1, "alice", "/approve")
    assert isinstance(check(probe, make_client, LATER), NotYet)
    assert "cannot approve it" in reply(hub)


def test_a_starter_zuke_has_no_record_of_lets_no_approval_count(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe(actor=None)
    no_self(hub, make_client, probe)
    assert "zuke has no record of who did, so no approval counts here" in hub.issues[1]["body"]
    hub.say(1, "maint", "/approve")
    assert isinstance(check(probe, make_client, LATER), NotYet)
    assert "zuke has no record of who started this release" in reply(hub)
    hub.say(1, "maint", "/deny then stop")  # a /deny still counts
    assert not isinstance(check(probe, make_client, LATER + 60_000), (NotYet, Satisfied))


def test_without_no_self_approval_the_sweeps_actor_is_nobody_special(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe(actor="alice")
    probe.check(gate(make_client()))
    assert "started the run" not in hub.issues[1]["body"]
    hub.say(1, "alice", "/approve")
    assert isinstance(probe.check(gate(make_client()), LATER), Satisfied)
