"""The run record's wire form: round-trips, tolerance, named errors, and delta algebra."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import reduce
from typing import Any

import pytest

from zuke._errors import CorruptRecordError
from zuke.state.records import (
    RunDelta,
    RunEvent,
    Signal,
    TargetRecord,
    WaitingFor,
    apply_delta,
    merge_deltas,
)
from zuke.state.wire import (
    delta_to_json,
    dumps_record,
    loads_record,
    parse_delta,
    parse_record,
    record_to_json,
)
from zuke.testing.store_contract import rich_record, sample_record


def minimal_json(**overrides: Any) -> dict[str, Any]:
    """The smallest record the parser accepts: no signals, events, meta or degraded."""
    raw: dict[str, Any] = {
        "id": "run-1",
        "build": "B",
        "rootTarget": "deploy",
        "status": "running",
        "actor": "alice",
        "createdAt": "2026-01-02T03:04:05.678Z",
        "updatedAt": "2026-01-02T03:04:05.678Z",
        "graph": [{"name": "deploy", "dependsOn": []}],
        "params": {},
        "targets": {"deploy": {"status": "pending"}},
    }
    raw.update(overrides)
    return raw


# ---------------------------------------------------------------- round trips


def test_a_rich_record_round_trips_through_its_json_form() -> None:
    record = rich_record("run-rich")
    assert parse_record(record_to_json(record)) == record
    assert parse_record(json.loads(json.dumps(record_to_json(record)))) == record


def test_the_stored_form_is_two_space_json_with_a_trailing_newline() -> None:
    record = rich_record("run-rich")
    text = dumps_record(record)
    assert text.endswith("}\n")
    assert text.startswith('{\n  "')
    assert loads_record(text) == record


def test_optional_keys_are_written_only_when_set() -> None:
    raw = record_to_json(sample_record("run-min"))
    for key in ("buildId", "deadlineAt", "intendedTerminal"):
        assert key not in raw
    assert raw["targets"]["build"] == {"status": "pending", "meta": {}}
    rich = record_to_json(rich_record("run-rich"))
    assert rich["buildId"] == "acme/widgets"
    assert rich["intendedTerminal"] == "cancelled"
    assert "detail" not in rich["events"][0]
    assert rich["events"][1]["detail"] == "not an owner"


def test_unknown_fields_round_trip_at_record_and_target_level() -> None:
    raw = minimal_json(futureField={"a": [1, None]}, schemaHint=3)
    raw["targets"]["deploy"]["futureRow"] = {"upload": {"status": "done", "attempts": 2}}
    record = parse_record(raw)
    assert record.extra == {"futureField": {"a": [1, None]}, "schemaHint": 3}
    assert record.targets["deploy"].extra == {
        "futureRow": {"upload": {"status": "done", "attempts": 2}}
    }
    out = record_to_json(record)
    assert out["futureField"] == {"a": [1, None]}
    assert out["targets"]["deploy"]["futureRow"] == raw["targets"]["deploy"]["futureRow"]


def test_effects_signal_ids_and_wait_checks_round_trip() -> None:
    raw = minimal_json()
    raw["targets"]["deploy"]["effects"] = {
        "upload": {"status": "done", "attempts": 2, "intentAt": "2026-01-01T00:00:00.000Z"},
        "notify": {"status": "pending", "attempts": 1},  # a client that keeps no intentAt
    }
    raw["targets"]["deploy"]["status"] = "waiting"
    raw["targets"]["deploy"]["waitingFor"] = {
        "trigger": "predicate", "onTimeout": "fail", "checkedAt": "2026-01-01T00:00:01.000Z",
        "detail": "not yet",
    }  # fmt: skip
    raw["signals"] = {"go": {"data": 1, "receivedAt": "2026-01-01T00:00:00.000Z", "id": "abc"}}
    record = parse_record(raw)
    row = record.targets["deploy"]
    assert row.effects["upload"].attempts == 2 and row.effects["notify"].intent_at is None
    assert row.waiting_for is not None and row.waiting_for.checked_at == "2026-01-01T00:00:01.000Z"
    assert record.signals["go"].id == "abc"
    out = record_to_json(record)
    assert out["targets"]["deploy"]["effects"] == raw["targets"]["deploy"]["effects"]
    assert out["targets"]["deploy"]["waitingFor"] == raw["targets"]["deploy"]["waitingFor"]
    assert out["signals"] == raw["signals"]


@pytest.mark.parametrize(
    ("on_timeout", "expected"),
    [
        ("fail", WaitingFor("t", on_timeout="fail")),
        ("cancel-run", WaitingFor("t", on_timeout="cancel-run")),
        ({"target": "rollback"}, WaitingFor("t", on_timeout="rollback", on_timeout_is_target=True)),
        ({"target": "fail"}, WaitingFor("t", on_timeout="fail", on_timeout_is_target=True)),
    ],
)
def test_on_timeout_dispositions_round_trip(on_timeout: object, expected: WaitingFor) -> None:
    raw = minimal_json()
    raw["targets"]["deploy"] = {
        "status": "waiting",
        "waitingFor": {"trigger": "t", "onTimeout": on_timeout},
    }
    record = parse_record(raw)
    assert record.targets["deploy"].waiting_for == expected
    assert record_to_json(record)["targets"]["deploy"]["waitingFor"]["onTimeout"] == on_timeout


# ---------------------------------------------------------------- tolerance


def test_missing_signals_events_meta_and_degraded_take_their_defaults() -> None:
    record = parse_record(minimal_json())
    assert record.signals == {}
    assert record.events == ()
    assert record.degraded is False
    assert record.targets["deploy"] == TargetRecord(status="pending")
    assert record.build_id is None


def test_a_signal_without_data_has_null_data() -> None:
    record = parse_record(minimal_json(signals={"go": {"receivedAt": "2026-01-02T00:00:00Z"}}))
    assert record.signals["go"] == Signal(data=None, received_at="2026-01-02T00:00:00Z")


def test_an_event_without_outcome_or_args_is_ok_with_no_args() -> None:
    record = parse_record(minimal_json(events=[{"at": "x", "tool": "signal", "actor": "bob"}]))
    assert record.events == (RunEvent(at="x", tool="signal", actor="bob"),)


# ---------------------------------------------------------------- errors name the field


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"status": "bogus"}, '"status" is "bogus"'),
        ({"status": 3}, '"status" must be a string'),
        ({"createdAt": 5}, '"createdAt"'),
        ({"actor": None}, '"actor"'),
        ({"degraded": "yes"}, '"degraded"'),
        ({"events": {"not": "a list"}}, '"events"'),
        ({"graph": "deploy"}, '"graph"'),
        ({"graph": [{"name": "deploy", "dependsOn": "build"}]}, '"dependsOn"'),
        ({"params": ["a"]}, "params"),
        ({"targets": {"deploy": {"status": "passed"}}}, '"status" is "passed"'),
        ({"targets": {"deploy": {"status": "pending", "startedAt": 1}}}, '"startedAt"'),
        ({"targets": {"deploy": {"status": "pending", "meta": []}}}, "meta"),
        ({"intendedTerminal": "done"}, '"intendedTerminal"'),
        ({"events": [{"at": "x", "tool": "t", "actor": "a", "outcome": "meh"}]}, "outcome"),
        ({"signals": {"go": {"data": 1}}}, '"receivedAt"'),
        (
            {
                "targets": {
                    "deploy": {
                        "status": "waiting",
                        "waitingFor": {"trigger": "t", "onTimeout": "later"},
                    }
                }
            },
            '"onTimeout"',
        ),
    ],
)
def test_wrong_types_and_unknown_statuses_name_the_field(
    overrides: dict[str, Any], named: str
) -> None:
    with pytest.raises(CorruptRecordError, match=r"^state: ") as caught:
        parse_record(minimal_json(**overrides))
    assert named in str(caught.value)
    assert "run-1" in str(caught.value)  # and the run


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '"run"', b"\xff\xfe"])
def test_text_that_is_not_a_record_is_a_corrupt_record(text: str | bytes) -> None:
    with pytest.raises(CorruptRecordError, match="state: somewhere"):
        loads_record(text, where="somewhere")


# ---------------------------------------------------------------- deltas

DELTA = RunDelta(
    updated_at="2026-01-02T04:00:00.000Z",
    status="suspended",
    actor="bob",
    degraded=True,
    deadline_at="2026-01-09T00:00:00.000Z",
    intended_terminal="failed",
    targets={"build": TargetRecord(status="failed", error="boom", extra={"futureRow": {}})},
    signals={"go": Signal(data={"ok": True}, received_at="2026-01-02T04:00:00.000Z")},
    events=(RunEvent(at="2026-01-02T04:00:00.000Z", tool="signal", actor="bob"),),
    params={"repo": "web"},
)


def test_a_delta_round_trips_through_its_json_form() -> None:
    assert parse_delta(delta_to_json(DELTA)) == DELTA
    bare = RunDelta(updated_at="x")
    assert delta_to_json(bare) == {"updatedAt": "x"}
    assert parse_delta({"updatedAt": "x"}) == bare


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        ({"updatedAt": "x", "status": "done"}, '"status"'),
        ({"status": "failed"}, '"updatedAt"'),
        ({"updatedAt": "x", "degraded": 1}, '"degraded"'),
        ({"updatedAt": "x", "targets": {"t": {"status": "nope"}}}, '"status" is "nope"'),
        ({"updatedAt": "x", "events": "e"}, '"events"'),
    ],
)
def test_a_bad_delta_names_the_field(raw: dict[str, Any], named: str) -> None:
    with pytest.raises(CorruptRecordError) as caught:
        parse_delta(raw, where="journal line 7")
    assert named in str(caught.value)
    assert "journal line 7" in str(caught.value)


def test_apply_delta_sets_given_fields_and_leaves_the_rest() -> None:
    record = rich_record("run-rich")
    after = apply_delta(record, DELTA)
    assert after.updated_at == DELTA.updated_at
    assert (after.status, after.actor, after.degraded) == ("suspended", "bob", True)
    assert after.intended_terminal == "failed"
    assert after.targets["build"] == DELTA.targets["build"]  # whole row replaced
    assert after.targets["deploy"] == record.targets["deploy"]
    assert after.signals == {**record.signals, **DELTA.signals}
    assert after.events == record.events + DELTA.events
    assert (after.build_id, after.extra, after.graph) == (
        record.build_id,
        record.extra,
        record.graph,
    )
    assert record == rich_record("run-rich"), "apply_delta must not mutate its input"


def test_an_empty_delta_only_moves_updated_at() -> None:
    record = rich_record("run-rich")
    assert apply_delta(record, RunDelta(updated_at="later")) == replace(record, updated_at="later")


def _delta(i: int) -> RunDelta:
    return RunDelta(
        updated_at=f"t{i}",
        status=("running", "suspended", None)[i % 3],
        actor=f"actor-{i}" if i % 2 else None,
        degraded=(None, True, False)[i % 3],
        targets={("build", "deploy")[i % 2]: TargetRecord(status="running", meta={"i": i})},
        signals={f"s{i % 2}": Signal(data=i, received_at=f"t{i}")},
        events=(RunEvent(at=f"t{i}", tool="step", actor="e"),) * (i % 3),
    )


@pytest.mark.parametrize(("a", "b"), [(0, 1), (1, 2), (2, 0), (3, 4), (5, 5)])
def test_merged_deltas_have_the_effect_of_applying_both_in_order(a: int, b: int) -> None:
    record = rich_record("run-rich")
    first, second = _delta(a), _delta(b)
    assert apply_delta(record, merge_deltas(first, second)) == apply_delta(
        apply_delta(record, first), second
    )


def test_merging_is_associative_over_a_sequence() -> None:
    record = rich_record("run-rich")
    deltas = [_delta(i) for i in range(9)]
    assert apply_delta(record, reduce(merge_deltas, deltas)) == reduce(apply_delta, deltas, record)


def test_an_error_names_both_the_callers_context_and_the_run() -> None:
    with pytest.raises(CorruptRecordError) as caught:
        parse_record(minimal_json(status="bogus"), where="PUT /runs/run-1 body")
    assert str(caught.value).startswith("state: PUT /runs/run-1 body (run 'run-1'): \"status\"")
    with pytest.raises(CorruptRecordError, match=r"^state: run 'run-1': \"status\""):
        parse_record(minimal_json(status="bogus"))
