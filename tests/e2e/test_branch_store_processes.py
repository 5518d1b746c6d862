"""The branch store between real ``zuke`` processes and the fake GitHub (``GITHUB_API_URL``).

* The write budget: a 10-target release with one ``github_workflow`` gate,
  started by one process (it suspends), resumed by a sweep in another, costs
  at most 12 commits in all — counted by the fake.
* Contention: 6 processes write records of their own and race one lock
  through the fake; exactly one wins the lock and no record is lost.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fixtures.fake_github import FakeGitHub
from tests.e2e.resume_support import actions, suspend, sweep
from tests.e2e.support import clean_env, write_build
from tests.gh.branch_support import BRANCH, REPO, UNLIMITED, add_main_branch, branch_store
from zuke.state._protocol import LockHeld
from zuke.testing.store_contract import sample_holder

pytestmark = pytest.mark.e2e

STATE = f"github://{REPO}?branch={BRANCH}"
BUILD = """
    from zuke import Build, target
    from zuke_gh import github_workflow

    STEPS = ["build", "unit", "package", "staging", "smoke"]
    AFTER = ["canary", "prod", "verify", "announce"]


    class Release(Build):
        @target
        def build(self, t):
            return t.executes(lambda: print("build"))

        @target
        def unit(self, t):
            return t.depends_on(self.build).executes(lambda: print("unit"))

        @target
        def package(self, t):
            return t.depends_on(self.unit).executes(lambda: print("package"))

        @target
        def staging(self, t):
            return t.depends_on(self.package).executes(lambda: print("staging"))

        @target
        def smoke(self, t):
            return t.depends_on(self.staging).executes(lambda: print("smoke"))

        @target
        def e2e(self, t):
            return t.depends_on(self.smoke).waits_for(
                lambda s: s.on(github_workflow(
                    lambda g: g.repo("acme/app").workflow("e2e.yml").ref("main")
                )).timeout("2h")
            )

        @target
        def canary(self, t):
            return t.depends_on(self.e2e).executes(lambda: print("canary"))

        @target
        def prod(self, t):
            return t.depends_on(self.canary).executes(lambda: print("prod"))

        @target
        def verify(self, t):
            return t.depends_on(self.prod).executes(lambda: print("verify"))

        @target
        def announce(self, t):
            return t.depends_on(self.verify).executes(lambda: print("announced"))
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO]) as fake:
        fake.add_workflow(REPO, "e2e.yml", inputs={"zuke_marker": {"required": False}},
                          run_name="${{ inputs.zuke_marker }}", jobs=["e2e"])  # fmt: skip
        add_main_branch(fake)
        yield fake


def env_for(gh: FakeGitHub) -> dict[str, str]:
    return {"ZUKE_STATE": STATE, "GITHUB_API_URL": gh.url, "GITHUB_TOKEN": gh.token}


def test_a_ten_target_release_with_one_gate_suspended_and_resumed_costs_at_most_12_commits(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    write_build(tmp_path, BUILD)
    run_id = suspend(tmp_path, ["announce"], env_for(gh))
    started = gh.stats()["commits"]
    (dispatched,) = gh.dispatched(REPO)
    gh.complete_run(dispatched["id"], "success")

    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0, summary
    assert actions(summary, run_id) == ["resumed"]
    with branch_store(gh) as store:
        found = store.get_run(run_id)
    assert found is not None and found.record.status == "succeeded"
    assert {row.status for row in found.record.targets.values()} == {"succeeded"}
    commits = gh.stats()["commits"]
    history = [c["message"].partition("\n")[0] for c in gh.log(REPO, BRANCH)]
    # the figure the docs report: one commit creates the branch, the rest are the run's
    assert commits <= 12, history
    assert history[-1] == "zuke state: branch created"
    assert f"run {run_id}: suspended" in history
    assert f"run {run_id}: succeeded" in history
    assert any(m.startswith(f"lock zuke-run-{run_id}: acquired by ") for m in history)
    print(f"commits: started {started}, in all {commits}: {list(reversed(history))}")
    # a second sweep finds nothing to do and commits nothing
    code, summary = sweep(tmp_path, env_for(gh))
    assert code == 0 and summary["runs"] == [], summary
    assert gh.stats()["commits"] == commits


RACER = """
    import json, sys
    from zuke_gh import GitHubClient
    from zuke_gh.branch_store import GitHubBranchStateStore
    from zuke.state._protocol import LockAcquired
    from zuke.testing.store_contract import sample_holder, sample_record

    url, token, index, go = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    store = GitHubBranchStateStore(GitHubClient(token=token, base_url=url), "acme/app")
    while not __import__("os").path.exists(go):
        pass
    written = []
    for n in range(3):
        record = sample_record(f"racer-{index}-{n}")
        assert store.create_run(record).__class__.__name__ == "Written"
        written.append(record.id)
    taken = store.acquire_lock("deploy-api", sample_holder(f"racer-{index}"), 600_000)
    print(json.dumps({"written": written, "won": isinstance(taken, LockAcquired)}))
    store.close()
"""


def test_six_processes_writing_their_own_records_and_racing_one_lock_lose_nothing(
    tmp_path: Path,
) -> None:
    with FakeGitHub.start(repos=[REPO], **UNLIMITED) as gh:
        script = tmp_path / "racer.py"
        script.write_text(textwrap.dedent(RACER))
        go = tmp_path / "go"
        racers = [
            subprocess.Popen(
                [sys.executable, str(script), gh.url, gh.token, str(i), str(go)],
                env=clean_env(),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(6)
        ]
        go.touch()  # released together (each spins on the file)
        results = []
        for proc in racers:
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))

        assert sum(r["won"] for r in results) == 1, results
        with branch_store(gh) as store:
            listed = {s.id for s in store.list_runs()}
            expected = {run_id for r in results for run_id in r["written"]}
            assert len(expected) == 18 and listed == expected
            assert all(store.get_run(run_id) is not None for run_id in expected)
            held = store.acquire_lock("deploy-api", sample_holder("checker"), 1_000)
            assert isinstance(held, LockHeld)
            (winner,) = [i for i, r in enumerate(results) if r["won"]]
            assert held.holder.run_id == f"racer-{winner}"
            entries = store.list_locks()
            assert [(e.key, e.fence) for e in entries] == [("deploy-api", 1)]
