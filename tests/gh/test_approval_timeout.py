"""``github_approval``'s timeout comment is posted at most once: a sweep killed after GitHub
made it, before the timeout was settled, leaves the next sweep to find it, not repeat it."""

from __future__ import annotations

from typing import Any

import pytest
import respx

from tests.gh._approval_support import BOT, SHA, Hub, Killed
from tests.gh.conftest import MakeClient
from tests.runs.support import HOUR, Harness, approval, release_build
from zuke._clock import ManualClock
from zuke.state.memory import MemoryStateStore
from zuke_gh import github_approval


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(alice="admin")
    return hub


def timed_out_comments(hub: Hub) -> list[dict[str, Any]]:
    return [c for c in hub.on(1) if "The gate timed out" in c["body"]]


def timed_out_release(hub: Hub, make_client: MakeClient) -> tuple[Harness, str, list[Any]]:
    client = make_client()
    trigger = github_approval(lambda a: a.repo("acme/app").client(lambda: client))
    calls: list[Any] = []
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    gate = approval(trigger, timeout="1h", on_timeout="rollback")
    h = Harness(release_build(store, calls, gate=gate), store, clock, env={"ZUKE_ACTOR": "alice"})
    run_id = h.start().run_id
    hub.now = clock.now_ms() + 2 * HOUR  # GitHub's clock agrees: past the deadline
    clock.advance(2 * HOUR)
    return h, run_id, calls


def test_a_pre_posted_copy_of_its_marker_does_not_stop_the_timeout_comment(
    hub: Hub, make_client: MakeClient
) -> None:
    h, run_id, _ = timed_out_release(hub, make_client)
    mark = f"<!-- zuke-approval-closed run={run_id} gate=approve -->"
    hub.say(1, "mallory", f"{mark}\nThe gate timed out; nothing to see.")
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    mine = [c for c in timed_out_comments(hub) if c["user"]["login"] == BOT]
    assert len(mine) == 1


def test_a_sweep_killed_after_the_timeout_comment_does_not_post_it_twice(
    hub: Hub, make_client: MakeClient
) -> None:
    client = make_client()
    trigger = github_approval(lambda a: a.repo("acme/app").client(lambda: client))
    calls: list[Any] = []
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    gate = approval(trigger, timeout="1h", on_timeout="rollback")
    h = Harness(release_build(store, calls, gate=gate), store, clock, env={"ZUKE_ACTOR": "alice"})
    run_id = h.start().run_id
    hub.now = clock.now_ms() + 2 * HOUR  # GitHub's clock agrees: past the deadline
    clock.advance(2 * HOUR)
    hub.kill_after_post = True  # the comment lands; the process dies before it hears so
    with pytest.raises(Killed):
        h.sweep()
    assert len(timed_out_comments(hub)) == 1 and h.record(run_id).status == "suspended"

    clock.advance(60_000)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    assert len(timed_out_comments(hub)) == 1
    assert hub.issues[1]["state"] == "closed"
    assert sum(isinstance(c, tuple) and c[0] == "rollback" for c in calls) == 1
