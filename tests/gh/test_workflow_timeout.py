"""A ``github_workflow`` gate that times out: ``cancel_remote_on_timeout()`` cancels the run
through the trigger's ``on_timeout`` hook before the disposition, and a hook that raises is
reported without stopping the disposition (in-process sweeps, a manual clock)."""

from __future__ import annotations

from typing import Any

import httpx
import respx

from tests.gh._workflow_support import DISPATCH, gate
from tests.gh.conftest import MakeClient
from tests.runs.support import HOUR, Harness, approval, release_build
from zuke._clock import ManualClock
from zuke._waits import WaitContext, WaitTrigger
from zuke.state.memory import MemoryStateStore

CANCEL = "/repos/acme/app/actions/runs/7/cancel"


def parked(trigger: WaitTrigger, on_timeout: str | None = None) -> tuple[Harness, str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    build = release_build(store, [], gate=approval(trigger, timeout="1h", on_timeout=on_timeout))
    h = Harness(build, store, clock)
    result = h.start()
    assert result.status == "suspended", result
    clock.advance(2 * HOUR)
    return h, result.run_id


def test_a_timed_out_gate_cancels_its_workflow_run_before_the_disposition_runs(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    seen: list[Any] = []
    holder: dict[str, Harness] = {}

    def cancelled(request: httpx.Request) -> httpx.Response:
        h = holder["h"]
        record = h.store.get_run(h.store.list_runs()[0].id).record  # type: ignore[union-attr]
        seen.append((record.status, record.targets["approve"].status))
        return httpx.Response(202, json={})

    cancel = router.post(CANCEL).mock(side_effect=cancelled)
    h, run_id = parked(gate(make_client(), lambda g: g.cancel_remote_on_timeout()), "cancel-run")
    holder["h"] = h
    report = h.sweep()
    assert [(e.action, e.result) for e in report.entries] == [("timed-out", "cancelled")]
    assert cancel.call_count == 1
    assert seen == [("suspended", "waiting")]  # before the disposition touched the run
    assert h.record(run_id).status == "cancelled"


def test_without_cancel_remote_on_timeout_nothing_is_cancelled(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    cancel = router.post(CANCEL).respond(202, json={})
    h, run_id = parked(gate(make_client()))
    assert [e.action for e in h.sweep().entries] == ["timed-out"]
    assert cancel.call_count == 0 and h.record(run_id).status == "failed"


def test_a_run_that_completed_meanwhile_is_no_reason_to_stop_the_timeout(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    msg = {"message": "Cannot cancel a workflow run that is completed."}
    router.post(CANCEL).respond(409, json=msg)
    h, _ = parked(gate(make_client(), lambda g: g.cancel_remote_on_timeout()))
    (entry,) = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "failed")
    assert "on_timeout" not in (entry.detail or "")


class _Raising(WaitTrigger):
    descriptor = "raising"

    def check(self, ctx: WaitContext) -> bool:
        return False

    async def on_timeout(self, ctx: WaitContext) -> None:
        raise RuntimeError("GitHub is down")


def test_a_raising_on_timeout_hook_is_reported_and_the_disposition_still_runs() -> None:
    h, run_id = parked(_Raising())
    (entry,) = h.sweep().entries
    assert (entry.action, entry.result) == ("timed-out", "failed")
    assert "on_timeout hook raised RuntimeError: GitHub is down" in (entry.detail or "")
    assert any("GitHub is down" in w for w in h.warnings)
    assert h.record(run_id).status == "failed"


def test_a_run_with_a_null_status_keeps_the_gate_waiting_until_its_timeout(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.post(DISPATCH).respond(200, json={"workflow_run_id": 7})
    router.get("/repos/acme/app/actions/workflows/e2e.yml/runs").respond(
        200, json={"total_count": 0, "workflow_runs": []}
    )
    router.get("/repos/acme/app/actions/runs/7").respond(
        200, json={"id": 7, "status": None, "html_url": "https://github.com/acme/app/runs/7"}
    )
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    build = release_build(store, [], gate=approval(gate(make_client()), timeout="1h"))
    h = Harness(build, store, clock)
    run_id = h.start().run_id
    clock.advance(HOUR // 2)
    (waiting,) = h.sweep().entries
    assert waiting.action == "still-waiting"
    assert "has no status (null)" in (waiting.detail or "")
    clock.advance(HOUR)
    (late,) = h.sweep().entries
    assert (late.action, late.result) == ("timed-out", "failed")
    assert h.record(run_id).status == "failed"
