"""The journal's line encoder: the C encoder made once writes exactly what
``json.dumps(obj, separators=(",", ":"))`` wrote (issue 28 §1: it was 60 % of encoding a
line), and refuses what json refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from zuke.state._journal import delta_line, encode_line
from zuke.state.records import RunDelta, TargetRecord

CASES: list[Any] = [
    {"a": 1, "b": [1, 2.5, None, True, False], "c": {"d": 'é\u2028\n\ud800"\\'}},
    "a string",
    12,
    [],
    {},
    {"nan": float("nan"), "inf": float("-inf"), "big": 1e300, "neg0": -0.0, "int": 10**30},
    {1: "int key", None: 2, 2.5: 3, False: 4},
    {"deep": [[[{"x": ["y"]}]]]},
]


@pytest.mark.parametrize("obj", CASES)
def test_a_line_is_what_json_dumps_wrote(obj: Any) -> None:
    expected = json.dumps(obj, separators=(",", ":")).encode("ascii") + b"\n"
    assert encode_line(obj) == expected
    assert encode_line(obj) == expected  # the encoder keeps no state between calls


def test_a_delta_line_is_one_ascii_line() -> None:
    row = TargetRecord(status="running", meta={"k": "v\nw"})
    delta = RunDelta(updated_at="2026-12-07T00:00:00.000Z", targets={"t\u00e9": row})
    line = delta_line(delta)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert json.loads(line)["targets"]["t\u00e9"]["meta"] == {"k": "v\nw"}


def test_what_json_refuses_is_refused() -> None:
    with pytest.raises(TypeError, match="not JSON serializable"):
        encode_line({"a": object()})
    # and the encoder still works after a refusal
    assert encode_line({"a": [1]}) == b'{"a":[1]}\n'
