"""``github_approval`` asking on an existing pull request (``on_pull_request``), between real
``zuke`` processes and the fake GitHub: only comments after the gate's request count, and
someone's own pull request is never closed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.approval_support import BUILD, CLOSED, REPO, env_for, fake_github, said
from tests.e2e.resume_support import actions, fs_store, record_of, suspend, sweep
from tests.e2e.support import write_build

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gh() -> Iterator[FakeGitHub]:
    with fake_github() as fake:
        yield fake


def test_on_a_pull_request_only_an_approve_after_the_request_counts_and_it_stays_open(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    pr = gh.add_pull_request(REPO, "Release 1.2", login="carol")
    gh.comment(REPO, pr, "maint", "/approve")  # before the gate asked: not for this release
    write_build(tmp_path, BUILD.replace('a.repo("acme/app")',
                                        f'a.repo("acme/app").on_pull_request({pr})'))  # fmt: skip
    (tmp_path / "m").mkdir()
    run_id = suspend(tmp_path, ["promote", "--markers", str(tmp_path / "m")], env_for(gh))
    (request,) = said(gh, pr)
    assert request.startswith(f"<!-- zuke-approval run={run_id} gate=qa ")
    assert [i["number"] for i in gh.issues(REPO)] == [pr]  # no issue opened

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["still-waiting"], summary
    assert f"/acme/app/pull/{pr}#issuecomment-" in summary["runs"][0]["detail"]

    gh.comment(REPO, pr, "maint", "/approve")
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and actions(summary, run_id) == ["resumed"], summary
    assert record_of(fs_store(tmp_path), run_id).status == "succeeded"
    assert said(gh, pr)[-1].startswith(CLOSED)
    (thread,) = gh.issues(REPO)
    assert thread["state"] == "open" and thread["pull_request"]  # someone's PR: never closed
