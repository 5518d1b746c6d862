"""``github_workflow`` past its deadline: the final check passes a run that completed by
the deadline (its ``updated_at``) and not one that completed after it, and never
dispatches (respx, the trigger asked directly)."""

from __future__ import annotations

import asyncio
from typing import Any

import respx

from tests.gh._workflow_support import RUNS, gate, run, runs_page
from tests.gh.conftest import START_MS, MakeClient
from zuke._clock import iso
from zuke._engine.context import merge_patch
from zuke._waits import GateState, NotYet, Satisfied, WaitContext, WaitTrigger, ask

DEADLINE = START_MS + 3_600_000
JOBS = "/repos/acme/app/actions/runs/7/jobs"


def final_check(trigger: WaitTrigger, meta: dict[str, Any]) -> Any:
    state = dict(meta)

    def write(patch: Any) -> None:
        state.update(merge_patch(state, patch))

    async def persist() -> None:
        return None

    ctx = WaitContext(
        run_id="r1", target="e2e", params={}, signals={},
        state=GateState(lambda: dict(state), write), now_ms=DEADLINE + 600_000,
        deadline_ms=DEADLINE, persist=persist,
    )  # fmt: skip
    assert ctx.as_of_ms == DEADLINE
    return asyncio.run(ask(trigger, ctx))


def completed_at(ms: int) -> dict[str, Any]:
    found = run(7, "m", status="completed", conclusion="success")
    found["updated_at"] = iso(ms).split(".")[0] + "Z"
    return found


def test_a_run_completed_by_the_deadline_passes_the_final_check(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get(RUNS).mock(return_value=runs_page(completed_at(DEADLINE - 60_000)))
    router.get(JOBS).respond(200, json={"total_count": 0, "jobs": []})
    answer = final_check(gate(make_client()), {"marker": "m", "runId": 7})
    assert isinstance(answer, Satisfied) and answer.payload["passed"] is True


def test_a_run_completed_after_the_deadline_does_not(
    router: respx.Router, make_client: MakeClient
) -> None:
    router.get(RUNS).mock(return_value=runs_page(completed_at(DEADLINE + 60_000)))
    answer = final_check(gate(make_client()), {"marker": "m", "runId": 7})
    assert isinstance(answer, NotYet) and "completed after the gate's deadline" in (
        answer.reason or ""
    )


def test_a_gate_never_dispatched_is_not_dispatched_past_its_deadline(
    router: respx.Router, make_client: MakeClient
) -> None:
    answer = final_check(gate(make_client()), {})
    assert isinstance(answer, NotYet) and not router.calls
