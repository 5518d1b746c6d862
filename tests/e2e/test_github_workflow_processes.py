"""The ``github_workflow`` gate between real ``zuke`` processes and the fake GitHub.

The fake serves from this test process on 127.0.0.1 (``GITHUB_API_URL`` points the children
at it); the test drives the dispatched runs. Every wait is on an observable event: a
process exiting, the fake receiving a request, a lease lapsing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.losing_proxy import LosingProxy
from tests.e2e.resume_support import (
    actions,
    fs_store,
    record_of,
    suspend,
    sweep,
    wait_for_lease_to_lapse,
)
from tests.e2e.support import finish, kill, spawn, wait_until, write_build

pytestmark = pytest.mark.e2e

REPO = "acme/app"
DISPATCH = "POST /repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches"
BUILD = """
    from zuke import Build, parameter, target
    from zuke_gh import github_workflow, read_workflow_result

    class Release(Build):
        mode = parameter("correlation").default("marker")
        discovery = parameter("discovery window").default("1m")

        @target
        def e2e(self, t):
            return t.waits_for(lambda s: s.on(github_workflow(self._workflow)).timeout("2h"))

        def _workflow(self, g):
            g.repo("acme/app").workflow("e2e.yml").ref("main").input("suite", "smoke")
            g.input("shards", 2).input("fast", True).input("label", None)  # sent as strings
            g.correlate(self.mode.value).discovery_timeout(self.discovery.value)

        @target
        def ship(self, t):
            return t.depends_on(self.e2e).executes(self._ship)

        def _ship(self, ctx):
            result = read_workflow_result(ctx.state_of("e2e"))
            if result is None or not result.passed:
                raise RuntimeError(f"e2e suite failed: {result.conclusion if result else None}")
            print(f"shipped after {result.url}: {[(j.name, j.conclusion) for j in result.jobs]}")
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO]) as fake:
        yield fake


def workflow(gh: FakeGitHub, *, run_name: str = "${{ inputs.zuke_marker }}",
             marker: bool = True) -> None:  # fmt: skip
    inputs: dict[str, dict[str, Any]] = {"suite": {"required": True}}
    inputs |= {name: {"required": False} for name in ("shards", "fast", "label")}
    if marker:
        inputs["zuke_marker"] = {"required": False}
    gh.add_workflow(REPO, "e2e.yml", inputs=inputs, run_name=run_name, jobs=["unit", "e2e"])


def env_for(gh: FakeGitHub, url: str | None = None) -> dict[str, str]:
    return {"GITHUB_API_URL": url or gh.url, "GH_TOKEN": gh.token}


def dispatches(gh: FakeGitHub) -> int:
    return int(gh.stats()["endpoints"].get(DISPATCH, 0))


def release(tmp_path: Path, gh: FakeGitHub, *args: str) -> str:
    write_build(tmp_path, BUILD)
    return suspend(tmp_path, ["ship", *args], env_for(gh))


def test_a_release_dispatches_suspends_waits_out_a_queued_run_and_ships_when_it_passes(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    run_id = release(tmp_path, gh)
    (dispatched,) = gh.dispatched(REPO)
    assert dispatched["display_title"] == f"zuke:{run_id}:e2e"
    # GitHub takes strings only (the fake refuses anything else with 422, as GitHub does)
    assert dispatched["inputs"] == {"suite": "smoke", "shards": "2", "fast": "true",
                                    "zuke_marker": f"zuke:{run_id}:e2e"}  # fmt: skip
    store = fs_store(tmp_path)
    meta = record_of(store, run_id).targets["e2e"].meta
    assert meta["runId"] == dispatched["id"]  # github.com answered with the run id
    assert gh.token not in str(meta)

    # Another process sweeps while the run is queued: the run stays suspended.
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    assert actions(summary, run_id) == ["still-waiting"]
    assert "is queued" in summary["runs"][0]["detail"]
    assert record_of(store, run_id).status == "suspended"

    gh.complete_run(dispatched["id"], "success", jobs=[("unit", "success"), ("e2e", "success")])
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    assert actions(summary, run_id) == ["resumed"]
    record = record_of(store, run_id)
    assert record.status == "succeeded"
    assert record.targets["ship"].status == "succeeded"
    result = record.targets["e2e"].meta["result"]
    assert result["passed"] is True and [j["name"] for j in result["jobs"]] == ["unit", "e2e"]
    assert dispatches(gh) == 1


def test_a_failed_suite_fails_ship(tmp_path: Path, gh: FakeGitHub) -> None:
    workflow(gh)
    run_id = release(tmp_path, gh)
    (dispatched,) = gh.dispatched(REPO)
    gh.complete_run(dispatched["id"], "failure", jobs=[("unit", "success"), ("e2e", "failure")])
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 1, summary
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "failed"
    assert record.targets["e2e"].status == "succeeded"  # the gate is over; the suite failed
    assert "e2e suite failed: failure" in (record.targets["ship"].error or "")


def test_on_ghes_the_refused_key_falls_back_to_a_plain_dispatch_and_marker_correlation(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    gh.set_ghes(REPO)
    run_id = release(tmp_path, gh)
    posts = [r for r in gh.requests if r["endpoint"] == DISPATCH]
    assert [r["status"] for r in posts] == [400, 204]
    (dispatched,) = gh.dispatched(REPO)
    store = fs_store(tmp_path)
    assert "runId" not in record_of(store, run_id).targets["e2e"].meta

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert record_of(store, run_id).targets["e2e"].meta["runId"] == dispatched["id"]
    gh.complete_run(dispatched["id"], "success")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and record_of(store, run_id).status == "succeeded", summary


def test_a_decorated_run_name_fails_fast_once_the_discovery_window_has_passed(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh, run_name="e2e ${{ inputs.zuke_marker }}")
    gh.set_ghes(REPO)  # no run id in the answer: the title is all there is
    run_id = release(tmp_path, gh, "--discovery", "1m")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary

    gh.advance_clock(90)  # GitHub's clock: 90 s since the dispatch
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 1, summary
    (entry,) = summary["runs"]
    assert entry["action"] == "gate-failed"  # its disposition is "fail": exit 1
    assert "run-name: ${{ inputs.zuke_marker }}" in entry["detail"]
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "failed" and record.targets["ship"].status == "skipped"
    assert "no run's title equals the marker" in (record.targets["e2e"].error or "")


def test_created_window_with_two_candidates_fails_loudly(tmp_path: Path, gh: FakeGitHub) -> None:
    workflow(gh, marker=False, run_name="E2E")  # a workflow nobody can change
    gh.set_ghes(REPO)
    run_id = release(tmp_path, gh, "--mode", "created-window")
    (ours,) = gh.dispatched(REPO)
    assert ours["inputs"] == {"suite": "smoke", "shards": "2", "fast": "true"}  # no marker
    (other,) = gh.add_run(REPO, "e2e.yml", event="workflow_dispatch", status="queued")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 1, summary
    detail = summary["runs"][0]["detail"]
    assert "ambiguous" in detail
    assert f"run {ours['id']} (" in detail and f"/actions/runs/{ours['id']}" in detail
    assert f"run {other} (" in detail and f"/actions/runs/{other}" in detail
    assert record_of(fs_store(tmp_path), run_id).status == "failed"


def test_a_second_run_carrying_the_marker_fails_loudly_naming_both(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    gh.set_ghes(REPO)  # no run id in the answer: the marker is all there is
    run_id = release(tmp_path, gh)
    (ours,) = gh.dispatched(REPO)
    # Someone dispatches the workflow by hand with the same marker before the sweep looks.
    (copy,) = gh.add_run(REPO, "e2e.yml", event="workflow_dispatch", status="queued",
                         display_title=f"zuke:{run_id}:e2e")  # fmt: skip
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 1, summary
    (entry,) = summary["runs"]
    assert entry["action"] == "gate-failed"  # its disposition is "fail": exit 1
    assert "2 workflow runs carry this gate's marker" in entry["detail"]
    for found in (ours["id"], copy):
        assert f"run {found} ({gh.url}/{REPO}/actions/runs/{found})" in entry["detail"]
    record = record_of(fs_store(tmp_path), run_id)
    assert record.status == "failed" and "runId" not in record.targets["e2e"].meta


def test_a_run_whose_status_is_null_or_unknown_keeps_waiting_and_says_so(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    run_id = release(tmp_path, gh)
    (dispatched,) = gh.dispatched(REPO)
    for status, shown in ((None, "has no status (null)"), ("teleported", "'teleported'")):
        gh.set_run_status(dispatched["id"], status, raw=True)
        code, summary = sweep(tmp_path, env_for(gh))
        assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
        assert shown in summary["runs"][0]["detail"]
        assert (
            "keeps waiting until it completes or the gate times out"
            in (summary["runs"][0]["detail"])
        )
        assert record_of(fs_store(tmp_path), run_id).status == "suspended"
        code, shown_by_cli = finish(spawn(["runs", "show", run_id], tmp_path, env_for(gh)))
        assert code == 0 and shown in shown_by_cli, shown_by_cli
    gh.complete_run(dispatched["id"], "success")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and record_of(fs_store(tmp_path), run_id).status == "succeeded", summary


def test_more_inputs_than_the_server_takes_fail_the_load_before_anything_runs(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    wide = BUILD.replace('g.input("shards", 2)', "g.inputs({f'x{n}': 'v' for n in range(8)})")
    write_build(tmp_path, wide)  # suite, fast, x0..x7 and the marker: 11, past the strict 10
    code, out = finish(spawn(["ship"], tmp_path, env_for(gh)))
    assert code == 2, out
    (line,) = out.strip().splitlines()
    assert line.startswith("zuke: ") and "11 dispatch inputs" in line
    assert "more than the 10 GitHub Enterprise Server" in line and ".input_limit(n)" in line
    assert dispatches(gh) == 0 and fs_store(tmp_path).list_runs() == []


def test_a_damaged_app_key_fails_the_release_at_its_first_dispatch(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    write_build(tmp_path, BUILD)
    damaged = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA!!damaged!!\n"
               "-----END RSA PRIVATE KEY-----\n")  # fmt: skip
    env = {"GITHUB_API_URL": gh.url, "ZUKE_GH_APP_ID": "99", "ZUKE_GH_APP_OWNER": "acme",
           "ZUKE_GH_APP_PRIVATE_KEY": damaged}  # fmt: skip
    code, out = finish(spawn(["ship"], tmp_path, env))
    assert code == 1, out  # not "suspended", exit 0, until the gate's deadline
    assert "cannot dispatch: the GitHub App private key could not be read" in out
    assert "damaged!!" not in out  # the key is never quoted
    (run,) = fs_store(tmp_path).list_runs()
    record = record_of(fs_store(tmp_path), run.id)
    assert record.status == "failed" and record.targets["e2e"].status == "failed"
    assert dispatches(gh) == 0 and gh.requests == []


def test_a_process_killed_mid_dispatch_is_reaped_and_re_polls_without_dispatching_twice(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    workflow(gh)
    proxy = LosingProxy(
        gh, lambda method, path, _: method == "POST" and path.endswith("/dispatches")
    )
    write_build(tmp_path, BUILD)
    store = fs_store(tmp_path)
    child = spawn(["ship"], tmp_path, {**env_for(gh, proxy.url), "ZUKE_RUN_LEASE_TTL": "1s"},
                  output=tmp_path / "out.txt")  # fmt: skip
    try:
        wait_until(proxy.landed.is_set, "the dispatch to reach GitHub")
        (run,) = store.list_runs()
        # The marker was durable before the POST left: the record already has it.
        assert record_of(store, run.id).targets["e2e"].meta["marker"] == f"zuke:{run.id}:e2e"
        kill(child)  # mid-dispatch: the process never hears GitHub's answer
    finally:
        kill(child)
        proxy.close()
    (dispatched,) = gh.dispatched(REPO)
    wait_for_lease_to_lapse(store, run.id)

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    assert actions(summary, run.id)[0] == "reaped", summary
    record = record_of(store, run.id)
    assert record.status == "suspended"
    assert record.targets["e2e"].meta["runId"] == dispatched["id"]  # found by its marker
    assert dispatches(gh) == 1

    gh.complete_run(dispatched["id"], "success")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and record_of(store, run.id).status == "succeeded", summary
    assert dispatches(gh) == 1 and len(gh.dispatched(REPO)) == 1
