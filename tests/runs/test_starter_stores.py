"""The starter and its source survive every store's wire unchanged: memory, filesystem,
``zuke serve`` (SQLite, over the HTTP store), Postgres and the GitHub branch store (its index
too) — through the first write, a resume's journal delta and a listing."""

from __future__ import annotations

from typing import Any

from tests.runs.support import Harness, release_build
from tests.runs.test_held_until import fake_gh, held_db, serve_url, store  # noqa: F401 (fixtures)
from zuke._clock import ManualClock
from zuke.state._protocol import StateStore

GITHUB = {"GITHUB_ACTIONS": "true", "GITHUB_TRIGGERING_ACTOR": "alice", "GITHUB_ACTOR": "bot"}


def test_the_starter_and_its_source_round_trip_every_store(store: StateStore) -> None:  # noqa: F811
    calls: list[Any] = []
    h = Harness(release_build(store, calls), store, ManualClock(), env=dict(GITHUB))
    run_id = h.start().run_id
    assert (h.record(run_id).actor, h.record(run_id).actor_source) == ("alice", "github")
    h.env.clear()  # the resumer is somebody else, somewhere else
    outcome = h.resume(run_id, "approved", {}, actor="bob")
    assert outcome.status == "succeeded"
    record = h.record(run_id)
    assert (record.actor, record.actor_source) == ("alice", "github")
    assert [e.actor for e in record.events if e.tool == "resume"] == ["bob"]
    assert [(s.id, s.actor) for s in store.list_runs()] == [(run_id, "alice")]
