"""The release engineer's scenario with real ``zuke`` processes: a lock held across a gate.

Two releases of one service: each deploys to staging (locking ``env-staging`` until its
``promote``), waits for QA, then promotes. The second is refused at staging while the
first waits, naming the first run and its gate; it goes through once the first promotes,
is cancelled, times out, or is reaped past its deadline (its resumer killed with -9).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.resume_support import (
    MARKER_WRITER,
    fs_store,
    gate_deadline,
    lines,
    record_of,
    suspend,
    sweep,
    wait_for_lease_to_lapse,
    wait_past,
)
from tests.e2e.support import finish, kill, spawn, wait_until, write_build
from zuke.state._protocol import StateStore

pytestmark = pytest.mark.e2e

KEY = "env-staging"
SHORT_LEASE = {"ZUKE_RUN_LEASE_TTL": "1s"}

RELEASE = (
    MARKER_WRITER
    + """
    import pathlib
    from zuke import Build, external_signal, parameter, target

    class Release(Build):
        tag = parameter("the build to release").required()
        markers = parameter("marker directory").required()
        window = parameter("QA's timeout").default("1h")
        limit = parameter("the run's deadline").default("")

        def deadline(self):
            return self.limit.value or None

        def _m(self, name):
            return pathlib.Path(self.markers.value) / name

        @target
        def deploy_staging(self, t):
            return (t.lock(lambda s: s.lock_key("env", "staging").with_ttl("10m")
                                      .held_until(self.promote))
                     .on_cancel(self.undeploy)
                     .executes(lambda: append_line(self._m("staging"), self.tag.value)))

        @target
        def qa(self, t):
            return t.depends_on(self.deploy_staging).waits_for(
                lambda s: s.on(external_signal("approved")).timeout(self.window.value))

        @target
        def promote(self, t):
            return t.depends_on(self.qa).executes(self._promote)

        def _promote(self):
            append_line(self._m("promote"), self.tag.value)
            if self._m("hold-promote").exists():
                wait_for(self._m("never"), "the marker that never comes (the test kills us)")

        @target
        def undeploy(self, t):
            return t.executes(lambda: append_line(self._m("undeploy"), self.tag.value))
"""
)


def setup(workdir: Path) -> Path:
    write_build(workdir, RELEASE)
    markers = workdir / "m"
    markers.mkdir()
    return markers


def release(workdir: Path, markers: Path, tag: str, *extra: str) -> list[str]:
    return ["promote", "--tag", tag, "--markers", str(markers), *extra]


def holder_of(store: StateStore) -> str | None:
    held = [e.holder.run_id for e in store.list_locks() if e.key == KEY]
    return held[0] if held else None


def refused_second(workdir: Path, markers: Path, first: str, tag: str) -> None:
    code, out = finish(spawn(release(workdir, markers, tag), workdir))
    assert code == 1, out
    assert f'Lock "{KEY}" is held by' in out and f"(run {first})" in out, out
    assert re.search(rf"held by run {first}, suspended at gate `qa` since \S+", out), out
    assert "until `promote` has finished" in out, out
    assert tag not in lines(markers / "staging")  # it never deployed over the first


def test_the_second_release_waits_for_the_first_to_promote(tmp_path: Path) -> None:
    markers = setup(tmp_path)
    store = fs_store(tmp_path)
    first = suspend(tmp_path, release(tmp_path, markers, "v1"))
    assert holder_of(store) == first
    refused_second(tmp_path, markers, first, "v2")

    code, out = finish(spawn(["locks", "list"], tmp_path))
    assert code == 0 and "suspended at gate `qa`" in out and "until `promote`" in out, out
    code, out = finish(spawn(["locks", "break", KEY, "--reason", "try"], tmp_path))
    assert code != 0 and out.startswith(f'zuke: lock "{KEY}" is kept by run {first}'), out
    assert len(out.strip().splitlines()) == 1 and "--force" in out, out

    code, out = finish(spawn(["resume", first, "--signal", "approved"], tmp_path))
    assert code == 0, out
    assert lines(markers / "promote") == ["v1"] and holder_of(store) is None
    second = suspend(tmp_path, release(tmp_path, markers, "v2"))
    assert holder_of(store) == second and lines(markers / "staging") == ["v1", "v2"]


def test_cancelling_the_first_releases_staging_after_its_compensation(tmp_path: Path) -> None:
    markers = setup(tmp_path)
    store = fs_store(tmp_path)
    first = suspend(tmp_path, release(tmp_path, markers, "v1"))
    code, out = finish(spawn(["cancel", first, "--actor", "ops"], tmp_path))
    assert code == 0, out
    assert lines(markers / "undeploy") == ["v1"]
    record = record_of(store, first)
    assert record.status == "cancelled" and record.held == {} and holder_of(store) is None
    assert suspend(tmp_path, release(tmp_path, markers, "v2")) != first


def test_a_first_release_that_times_out_in_the_sweep_releases_staging(tmp_path: Path) -> None:
    markers = setup(tmp_path)
    store = fs_store(tmp_path)
    first = suspend(tmp_path, release(tmp_path, markers, "v1", "--window", "1s"))
    refused_second(tmp_path, markers, first, "v2")
    wait_past(gate_deadline(record_of(store, first), "qa"), "QA's deadline")
    code, summary = sweep(tmp_path)
    assert code == 1, summary  # a timed-out gate fails its run
    assert record_of(store, first).status == "failed" and holder_of(store) is None
    second = suspend(tmp_path, release(tmp_path, markers, "v2"))
    assert holder_of(store) == second


def test_a_first_release_killed_mid_promote_is_reaped_past_its_deadline(tmp_path: Path) -> None:
    markers = setup(tmp_path)
    store = fs_store(tmp_path)
    first = suspend(tmp_path, release(tmp_path, markers, "v1", "--limit", "3s"))
    (markers / "hold-promote").write_text("")
    resumer = spawn(["resume", first, "--signal", "approved"], tmp_path, SHORT_LEASE)
    try:
        wait_until(lambda: lines(markers / "promote") == ["v1"], "the resumer to promote")
    finally:
        kill(resumer)  # -9: nobody gives anything back
    assert holder_of(store) == first  # the lock outlives its killed holder (10m TTL)
    wait_for_lease_to_lapse(store, first)
    wait_past(record_of(store, first).deadline_at, "the run's deadline")

    _, summary = sweep(tmp_path)
    assert [e["action"] for e in summary["runs"] if e["id"] == first] == ["reaped"], summary
    record = record_of(store, first)
    assert record.status == "failed" and record.held == {}
    assert holder_of(store) is None  # released by the reaper, not left to its 10m TTL
    assert lines(markers / "undeploy") == ["v1"]  # settled with its compensations
    assert suspend(tmp_path, release(tmp_path, markers, "v2")) != first
