"""The Postgres store's JSON text (``_pg_runs.dumps``): its encoder is made once, and says
exactly what ``json.dumps`` said — compact, Unicode as itself, a lone surrogate escaped,
NaN and infinities refused (issue 28 §2)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zuke.state._pg_runs import dumps
from zuke.state.records import RunDelta, TargetRecord
from zuke.state.wire import delta_to_json, record_to_json
from zuke.testing.store_contract import sample_record

AT = "2026-01-02T03:04:05.678Z"


def _before(raw: Any) -> str:
    return json.dumps(raw, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


@pytest.mark.parametrize(
    "raw",
    [
        delta_to_json(RunDelta(updated_at=AT, targets={
            "t0001": TargetRecord(status="succeeded", started_at=AT, ended_at=AT),
            "t0002": TargetRecord(status="running", started_at=AT)})),
        record_to_json(sample_record("run-1")),
        {"a": "Zoë — ✓ 発行", "b": [1, 2.5, None, True, False], "c": {"d": "\u2028\x00\"\\"}},
        {"big": 1e300, "neg": -0.0, "int": 2**70},
        "plain",
        [],
    ],
)  # fmt: skip
def test_the_text_is_json_dumps_text(raw: Any) -> None:
    assert dumps(raw) == _before(raw)


def test_a_lone_surrogate_is_escaped() -> None:
    raw = {"by": "\ud800x"}
    assert dumps(raw) == '{"by":"\\ud800x"}'
    assert json.loads(dumps(raw)) == raw


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_number_json_cannot_say_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="not JSON compliant"):
        dumps({"n": bad})
