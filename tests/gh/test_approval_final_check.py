"""``github_approval`` past its deadline: the final check counts only comments made, and not
edited, by the deadline (in-process, respx)."""

from __future__ import annotations

from typing import Any

import pytest
import respx

from tests.gh._approval_support import SHA, Hub
from tests.gh.conftest import MakeClient
from tests.runs.support import HOUR, Harness, approval, release_build
from zuke._clock import ManualClock
from zuke.state.memory import MemoryStateStore
from zuke_gh import github_approval


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain", alice="admin")
    return hub


def harness(make_client: MakeClient, calls: list[Any]) -> tuple[Harness, str]:
    client = make_client()
    trigger = github_approval(lambda a: a.repo("acme/app").client(lambda: client))
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    gate = approval(trigger, timeout="1h", on_timeout="rollback")
    h = Harness(release_build(store, calls, gate=gate), store, clock, env={"ZUKE_ACTOR": "alice"})
    return h, h.start().run_id


def test_an_approve_in_time_counts_on_a_sweep_after_the_deadline(
    hub: Hub, make_client: MakeClient
) -> None:
    calls: list[Any] = []
    h, _run_id = harness(make_client, calls)
    hub.say(1, "maint", "/approve")
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("resumed", "succeeded")
    assert hub.issues[1]["state"] == "closed"


def test_an_approve_after_the_deadline_does_not_count(hub: Hub, make_client: MakeClient) -> None:
    calls: list[Any] = []
    h, run_id = harness(make_client, calls)
    hub.now = h.clock.now_ms() + HOUR + 60_000  # GitHub's clock: a minute past the deadline
    hub.say(1, "maint", "/approve")
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    assert "decision" not in h.record(run_id).targets["approve"].meta
    assert "The gate timed out" in hub.on(1)[-1]["body"]


def test_a_comment_made_in_time_but_edited_after_the_deadline_does_not_count(
    hub: Hub, make_client: MakeClient
) -> None:
    calls: list[Any] = []
    h, _run_id = harness(make_client, calls)
    made = hub.say(1, "maint", "lgtm")
    hub.now = h.clock.now_ms() + HOUR + 60_000
    hub.edit(made["id"], "/approve")  # what it says now, it did not say in time
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")


def _deadline_ms(h: Harness, run_id: str) -> int:
    from zuke._clock import parse_iso

    waiting = h.record(run_id).targets["approve"].waiting_for
    assert waiting is not None and waiting.deadline is not None
    at = parse_iso(waiting.deadline)
    assert at is not None
    return at


@pytest.mark.parametrize(("before_s", "counts"), [(0, False), (1, True)])
def test_an_approve_stamped_in_the_deadlines_own_second_does_not_count(
    hub: Hub, make_client: MakeClient, before_s: int, counts: bool
) -> None:
    # GitHub stamps whole seconds: a comment stamped at the deadline's second may have come
    # up to 999 ms after it (0.12 s late, say). It counts only if its stamp + 999 ms is in time.
    calls: list[Any] = []
    h, run_id = harness(make_client, calls)
    deadline = _deadline_ms(h, run_id)
    assert deadline % 1000 == 0  # the case is exact: a stamp at the deadline's second
    hub.now = deadline - before_s * 1000 - 1000  # hub.say ticks a second on
    hub.say(1, "maint", "/approve")
    h.clock.advance(2 * HOUR)
    [entry] = h.sweep().entries
    assert (entry.action == "resumed") is counts, entry
