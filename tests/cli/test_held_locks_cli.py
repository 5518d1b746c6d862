"""``zuke locks list|break`` and ``runs show`` for a run-held lock (``held_until``).

A suspended run keeps ``env-staging`` with no live lease: ``locks list`` says which run
keeps it, where it waits and until which target; ``locks break`` refuses it without
``--force`` (one ``zuke:`` line saying why and how); with ``--force`` the run's resume
fails rather than promote unguarded. ``runs show`` says the run holds it, never its token.
"""

from __future__ import annotations

import json
from typing import Any

from tests.conftest import CliRunner
from tests.runs.test_held_until import KEY, harness, holders, parked
from zuke.state.memory import MemoryStateStore


def suspended() -> tuple[Any, MemoryStateStore, str, list[Any]]:
    store = MemoryStateStore()
    calls: list[Any] = []
    h = harness(store, calls)
    return h, store, parked(h), calls


def test_locks_list_shows_the_run_that_keeps_it_suspended_at_its_gate(cli: CliRunner) -> None:
    h, _, run_id, _ = suspended()
    result = cli("locks", "list", build=h.build)
    assert result.code == 0, result.text
    header, row = result.out.splitlines()
    assert header.split()[-3:] == ["HELD", "BY", "RUN"]
    assert row.split()[:3] == [KEY, h.record(run_id).actor, run_id]
    parked_at = h.record(run_id).parked_at
    assert f"suspended at gate `qa` since {parked_at}, until `promote`" in row

    [entry] = json.loads(cli("locks", "list", "--json", build=h.build).out)
    assert entry["heldByRun"] == {
        "runStatus": "suspended", "suspended": True, "gates": ["qa"],
        "parkedAt": parked_at, "until": "promote",
    }  # fmt: skip


def test_locks_list_shows_no_column_for_ordinary_locks(cli: CliRunner) -> None:
    from tests.cli.test_locks_cli import build_on, hold

    store = MemoryStateStore()
    hold(store, "deploy-api")
    header = cli("locks", "list", build=build_on(store)).out.splitlines()[0]
    assert header.split() == ["KEY", "ACTOR", "RUN", "SINCE", "EXPIRES", "FENCE"]


def test_locks_break_refuses_a_suspended_runs_lock_without_force(cli: CliRunner) -> None:
    h, store, run_id, _ = suspended()
    result = cli("locks", "break", KEY, "--reason", "stuck", build=h.build)
    assert result.code != 0
    [line] = result.err.splitlines()
    assert line.startswith(f'zuke: lock "{KEY}" is kept by run {run_id} (suspended at gate `qa`')
    assert f"zuke cancel {run_id}" in line and "--force" in line
    assert holders(store) == {KEY: run_id}


def test_locks_break_force_then_the_resume_fails_rather_than_promote_unguarded(
    cli: CliRunner,
) -> None:
    h, store, run_id, calls = suspended()
    result = cli("locks", "break", KEY, "--reason", "QA abandoned", "--force", build=h.build)
    assert result.code == 0, result.text
    assert holders(store) == {}
    record = h.record(run_id)
    assert KEY not in record.locks and KEY in record.held  # the run still knows it kept it
    outcome = h.resume(run_id, "approved", {})
    assert outcome.status == "failed"
    assert [c[0] for c in calls] == ["deploy"]
    assert "was broken while the run was suspended" in (h.record(run_id).targets["qa"].error or "")


def test_runs_show_says_the_run_holds_it_never_its_token(cli: CliRunner) -> None:
    h, _, run_id, _ = suspended()
    token = h.record(run_id).locks[KEY]
    shown = cli("runs", "show", run_id, build=h.build)
    assert shown.code == 0, shown.text
    assert KEY in shown.out and token not in shown.out
    as_json = cli("runs", "show", run_id, "--json", build=h.build)
    assert as_json.code == 0, as_json.text
    assert token not in as_json.out
    assert json.loads(as_json.out)["heldLocks"][KEY]["until"] == "promote"
