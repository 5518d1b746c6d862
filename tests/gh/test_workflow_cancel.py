"""``zuke cancel`` of a run waiting on a ``github_workflow`` gate cancels the workflow run the
gate dispatched (``POST /actions/runs/{id}/cancel``: 202; 409 when it had finished already),
recorded in the run's events; ``.keep_remote_on_cancel()`` leaves it running (in-process,
respx, a manual clock)."""

from __future__ import annotations

from typing import Any

import respx

from tests.gh._workflow_support import DISPATCH, RUNS, gate, runs_page
from tests.gh.conftest import MakeClient
from tests.runs.support import Harness, approval, release_build
from zuke._clock import ManualClock
from zuke._engine.gate_cancel import GATE_CANCEL_EVENT
from zuke._waits import WaitTrigger
from zuke.runs.cancel import CancelResult, cancel_run
from zuke.state.memory import MemoryStateStore

CANCEL = "/repos/acme/app/actions/runs/7/cancel"
URL = "https://github.com/acme/app/actions/runs/7"
WHERE = "github_workflow acme/app e2e.yml@main"


def cancelled(trigger: WaitTrigger) -> tuple[CancelResult, list[tuple[str | None, str]]]:
    """Park a release at the gate, then ``zuke cancel`` it; the gate's events."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    h = Harness(release_build(store, [], gate=approval(trigger, timeout="1h")), store, clock)
    result = h.start()
    assert result.status == "suspended", result
    done = cancel_run(store, result.run_id, actor="carol", build=h.build, env={}, clock=clock)
    assert done.status == "cancelled"
    events = h.record(result.run_id).events
    return done, [(e.detail, e.outcome) for e in events if e.tool == GATE_CANCEL_EVENT]


def test_cancel_cancels_the_dispatched_workflow_run_and_records_it(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7, "html_url": URL})
    cancel = router.post(CANCEL).respond(202, json={})
    result, told = cancelled(gate(make_client()))
    assert cancel.call_count == 1
    said = f"{WHERE}: asked GitHub to cancel workflow run {URL} (202)"
    assert told == [(said, "ok")]
    assert result.gates == [f"gate 'approve': {said}"]


def test_a_run_that_finished_meanwhile_is_said_so(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7, "html_url": URL})
    msg = {"message": "Cannot cancel a workflow run that is completed."}
    router.post(CANCEL).respond(409, json=msg)
    _, told = cancelled(gate(make_client()))
    assert told == [(f"{WHERE}: workflow run {URL} had already finished (409); left as is", "ok")]


def test_keep_remote_on_cancel_leaves_it_running(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7, "html_url": URL})
    cancel = router.post(CANCEL).respond(202, json={})
    _, told = cancelled(gate(make_client(), lambda g: g.keep_remote_on_cancel()))
    assert cancel.call_count == 0
    assert told == [(f"{WHERE}: its workflow run was left running (keep_remote_on_cancel())",
                     "ok")]  # fmt: skip


def test_a_run_found_by_its_marker_is_cancelled(
    router: respx.Router, make_client: MakeClient
) -> None:
    """An older server gives no run id: the run is identified as a poll would (its marker)."""
    router.post(DISPATCH).respond(204)
    listed: dict[str, Any] = {}

    def listing(request: Any) -> Any:
        from tests.gh._workflow_support import run

        marker = listed["marker"]
        return runs_page(run(7, marker, status="in_progress"))

    router.get(RUNS).mock(side_effect=listing)
    cancel = router.post(CANCEL).respond(202, json={})

    class Marked(WaitTrigger):
        """The workflow gate, noting the marker it dispatched with."""

        def __init__(self, inner: WaitTrigger) -> None:
            self.inner = inner

        @property
        def descriptor(self) -> str:
            return self.inner.descriptor

        async def check(self, ctx: Any) -> Any:
            listed["marker"] = f"zuke:{ctx.run_id}:{ctx.target}"
            return await self.inner.check(ctx)  # type: ignore[misc]

        async def on_cancel(self, ctx: Any) -> str | None:
            return await self.inner.on_cancel(ctx)

    _, told = cancelled(Marked(gate(make_client())))
    assert cancel.call_count == 1
    assert told == [(f"{WHERE}: asked GitHub to cancel workflow run {URL} (202)", "ok")]


def test_a_gate_that_never_dispatched_has_nothing_to_cancel(
    router: respx.Router, make_client: MakeClient
) -> None:
    limited = {"x-ratelimit-remaining": "0", "x-ratelimit-reset": "1700003600"}
    router.post(DISPATCH).respond(
        403, json={"message": "API rate limit exceeded"}, headers=limited
    )  # GitHub did not act on it: owed, undone
    cancel = router.post(CANCEL).respond(202, json={})
    _, told = cancelled(gate(make_client()))
    assert cancel.call_count == 0
    assert told == [("nothing to do", "ok")]


def test_a_failed_cancel_request_is_recorded_and_the_cancel_goes_on(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7, "html_url": URL})
    router.post(CANCEL).respond(403, json={"message": "Resource not accessible by integration"})
    result, told = cancelled(gate(make_client()))
    [(detail, outcome)] = told
    assert outcome == "error" and "on_cancel hook raised" in (detail or "")
    assert "Resource not accessible by integration" in (detail or "")
    assert result.status == "cancelled"
