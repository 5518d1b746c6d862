"""``github_approval`` across a process killed mid-call: GitHub acted, the answer was lost.

A proxy between the ``zuke`` process and the fake GitHub forwards one chosen call, lets
GitHub act on it and never answers; the test then kills the process. The next sweep, in a
fresh process, must find what GitHub made instead of making it twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import (
    BUILD,
    CLOSED,
    REPO,
    env_for,
    fake_github,
    issue_of,
    promoted,
    release,
    said,
)
from tests.e2e.losing_proxy import LosingProxy
from tests.e2e.resume_support import (
    actions,
    fs_store,
    record_of,
    sweep,
    wait_for_lease_to_lapse,
)
from tests.e2e.support import kill, spawn, wait_until, write_build

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        yield fake


def test_a_process_killed_while_opening_the_issue_is_reaped_and_adopts_it(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    proxy = LosingProxy(gh, lambda method, path, _: (method, path) == (
        "POST", f"/repos/{REPO}/issues"))  # fmt: skip
    write_build(tmp_path, BUILD)
    markers = tmp_path / "m"
    markers.mkdir()
    env = {**env_for(gh), "GITHUB_API_URL": proxy.url, "ZUKE_RUN_LEASE_TTL": "1s"}
    child = spawn(["promote", "--markers", str(markers)], tmp_path, env,
                  output=tmp_path / "out.txt")  # fmt: skip
    try:
        wait_until(proxy.landed.is_set, "the issue's POST to reach GitHub")
        kill(child)  # GitHub opened the issue; the process never heard
    finally:
        kill(child)
        proxy.close()
    store = fs_store(tmp_path)
    (run,) = store.list_runs()
    made = issue_of(gh, run.id)
    assert record_of(store, run.id).targets["qa"].meta["opening"] is True  # durable first
    wait_for_lease_to_lapse(store, run.id)

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run.id)[0] == "reaped", summary
    assert summary["runs"][-1]["result"] == "suspended", summary
    meta = record_of(store, run.id).targets["qa"].meta
    assert meta["issue"] == made["number"] and not meta.get("opening")
    issue_of(gh, run.id)  # still exactly one issue for this run

    gh.comment(REPO, made["number"], "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run.id) == ["resumed"], summary
    assert [row[0] for row in promoted(markers)[0]] == ["maint"]


def test_a_sweep_killed_while_closing_does_not_close_twice(tmp_path: Path, gh: FakeGitHub) -> None:
    run_id, markers, number = release(tmp_path, gh)
    gh.comment(REPO, number, "maint", "/approve")
    closing = f"/repos/{REPO}/issues/{number}/comments"
    proxy = LosingProxy(gh, lambda method, path, body: method == "POST" and path == closing
                        and b"zuke-approval-closed" in body)  # fmt: skip
    env = {**env_for(gh), "GITHUB_API_URL": proxy.url, "ZUKE_RUN_LEASE_TTL": "1s"}
    child = spawn(["resume", "--check"], tmp_path, env, output=tmp_path / "out.txt")
    try:
        wait_until(proxy.landed.is_set, "the closing comment to reach GitHub")
        kill(child)  # the decision is durable; the closing comment is on GitHub, unheard
    finally:
        kill(child)
        proxy.close()
    store = fs_store(tmp_path)
    meta = record_of(store, run_id).targets["qa"].meta
    assert meta["decision"]["approved"] is True and "closeComment" not in meta
    wait_for_lease_to_lapse(store, run_id)

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id)[-1] == "resumed", summary
    assert [b.startswith(CLOSED) for b in said(gh, number)] == [True]  # found, not resent
    assert issue_of(gh, run_id)["state"] == "closed"
    assert record_of(store, run_id).status == "succeeded" and len(promoted(markers)) == 1
