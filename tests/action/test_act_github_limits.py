"""Issue 16's "Done when" scenario under a real Actions runner (nektos/act), on a fake GitHub
that keeps GitHub's read and write limits, with ``Blob.text`` cut small (4,000 bytes) so small
data reaches the cut:

1. a fresh repository (``main`` only): a release job makes the state branch (a README in its
   first, orphan commit; the marker tag) and suspends at its ``github_workflow`` gate;
2. 30 runs that finish at once (unpaced, so spread over minutes of GitHub's clock: 80 writes a
   minute): their listing shard passes the cut, and ``zuke runs list`` lists every one;
3. a release whose record holds a 2,000-item fan-out (far past the cut) suspends at the gate;
4. one more does; the fake completes every dispatched e2e run (three releases wait);
5. a paced sweep with a write budget for two resumes resumes two, defers one (still
   suspended, not failed, the step green) and waits out a GraphQL ``RATE_LIMITED`` answer
   injected mid-sweep, saying so in the log; a sweep minutes later counts those commits from
   the branch and defers it again;
6. an hour later by GitHub's clock, a second sweep finishes it;
7. every release succeeded exactly once (the fan-out with its 2,000 items), no run was lost,
   no fence went back, and no token is in any log or on the branch.

About 40 s on the 2-core dev machine: most of it is the 30 ``zuke`` processes and the paced
writes (a second apart, as GitHub asks).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from fixtures.fake_github import FakeGitHub
from tests.action.act_support import (
    EXAMPLES,
    SLUG,
    ActResult,
    make_repo,
    requires_act,
    run_act,
    sweep_env,
    zuke,
)
from tests.gh.branch_support import BRANCH, branch_store
from zuke.state import RunQuery

pytestmark = [pytest.mark.act, requires_act]

ACT_TOKEN = "ghs_act-test-token"  # what run_act passes as the GITHUB_TOKEN secret
CUT = 4_000  # the fake's Blob.text cut (GitHub's: 512,000 bytes, sveltia-cms#950)
QUICK_RUNS = 30
FAN_OUT = 2_000
RESUME_COMMITS = 4  # a resume's commits (docs/github-state.md § write budget)
MARKER_TAG = f"refs/tags/zuke-state/{BRANCH}"
BUILD = """
from zuke import Build, parameter, target
from zuke_gh import github_workflow, read_workflow_result


class Release(Build):
    service = parameter("the service to release").required()
    items = parameter("how many items the batch fans out over").integer().default(0)

    @target
    def quick(self, t):
        return t.executes(lambda: print("quick", self.service.value))

    @target
    def staging(self, t):
        return t.executes(lambda: print("staging", self.service.value))

    @target
    def batch(self, t):
        return t.depends_on(self.staging).for_each(
            lambda: [f"item-{i:04d}" for i in range(self.items.value)],
            lambda item, index: {"check": target().executes(lambda: None)},
            lambda s: s.concurrency(8),
        )

    @target
    def e2e(self, t):
        return t.depends_on(self.batch).waits_for(
            lambda s: s.on(github_workflow(lambda g: g.repo("acme/app").workflow("e2e.yml")
                                           .ref("main"))).timeout("6h")
        )

    @target
    def release(self, t):
        return t.depends_on(self.e2e).executes(self._release)

    def _release(self, ctx):
        result = read_workflow_result(ctx.state_of("e2e"))
        assert result is not None and result.passed
        print("released", self.service.value, "after", result.conclusion)
"""


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    """A fresh repository: ``main`` with one commit (the fake's default), no state branch."""
    with FakeGitHub.start(tokens=[ACT_TOKEN], repos=[SLUG], blob_text_limit=CUT) as fake:
        fake.add_workflow(SLUG, "e2e.yml", inputs={"zuke_marker": {"required": True}},
                          run_name="${{ inputs.zuke_marker }}", jobs=["e2e"])  # fmt: skip
        yield fake


def _api(gh: FakeGitHub) -> httpx.Client:
    """A plain REST client of the fake, to read the branch as anyone could."""
    return httpx.Client(base_url=gh.url, headers={"Authorization": f"Bearer {ACT_TOKEN}"})


def _paths_at(gh: FakeGitHub, sha: str) -> set[str]:
    with _api(gh) as api:
        tree = api.get(f"/repos/{SLUG}/git/trees/{sha}", params={"recursive": 1})
    return {e["path"] for e in tree.raise_for_status().json()["tree"] if e["type"] == "blob"}


def _blob_sha(text: str) -> str:
    """A file's git blob SHA (what ``GET /git/blobs/{sha}`` names)."""
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _locks_history(gh: FakeGitHub) -> list[dict[str, Any]]:
    """``locks.json`` at every commit of the branch, oldest first (absent: ``{}``)."""
    found: list[dict[str, Any]] = []
    with _api(gh) as api:
        for commit in reversed(gh.log(SLUG, BRANCH)):
            path = f"/repos/{SLUG}/contents/locks.json"
            answer = api.get(path, params={"ref": commit["sha"]})
            if answer.status_code == 404:
                found.append({})
                continue
            found.append(json.loads(base64.b64decode(answer.raise_for_status().json()["content"])))
    return found


def _assert_fences_never_went_back(history: list[dict[str, Any]]) -> None:
    """The floor never drops; a key's fence never drops; a new claim is above the floor."""
    floor, fences = 0, dict[str, int]()
    for locks in history:
        new_floor = int(locks.get("fenceFloor", 0))
        assert new_floor >= floor, f"fenceFloor went back: {floor} -> {new_floor}"
        for key, claim in (locks.get("claims") or {}).items():
            fence = int(claim["fence"])
            before = fences.get(key)
            assert before is None or fence >= before, f"{key}: fence {before} -> {fence}"
            if fence != before:
                assert fence > floor, f"{key}: fence {fence} not above the floor {floor}"
            fences[key] = fence
        floor = new_floor
    assert fences and floor > 0, "no lock was ever claimed and released: nothing was checked"


@contextmanager
def rate_limited_mid_sweep(gh: FakeGitHub, retry_after: int) -> Iterator[threading.Event]:
    """Once the sweep's first commit has landed, the next GraphQL answer is GitHub's
    rate-limited HTTP 200 (``RATE_LIMITED``, the reset ``retry_after`` s on); the event is set
    when the fault is in place. The watch polls the fake's commit count until then."""
    base = int(gh.stats()["commits"])
    stop, injected = threading.Event(), threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if int(gh.stats()["commits"]) > base:
                gh.inject("/graphql", status=200, retry_after=retry_after)
                injected.set()
                return
            stop.wait(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield injected
    finally:
        stop.set()
        watcher.join(timeout=10)


def _actions(result: ActResult) -> dict[str, str]:
    """Run id -> what the sweep did with it (the job summary's table)."""
    return {row["Run"].strip("`"): row["Action"] for row in result.summary_rows()}


@pytest.mark.timeout(600)  # a dozen act jobs, each a container: a hang guard, not a timing
def test_a_fresh_repository_under_githubs_limits_defers_and_finishes_every_release(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        build_py=BUILD,
        workflows=[EXAMPLES / "release.yml", EXAMPLES / "sweep.yml"],
    )
    assert gh.head(SLUG, "main") is not None and gh.head(SLUG, BRANCH) is None
    env = sweep_env(api_url=gh.url)
    cli = {
        "GITHUB_API_URL": gh.url,
        "GITHUB_TOKEN": ACT_TOKEN,
        "ZUKE_STATE": f"github://{SLUG}?branch={BRANCH}",
    }
    logs: list[str] = []

    # 1. the release job makes the branch: a README in its first commit, and the marker tag
    started = run_act(repo, "workflow_dispatch", "release.yml", env=env,
                      inputs={"service": "api"}, cache=tmp_path / "release")  # fmt: skip
    logs.append(started.log)
    assert started.job_succeeded(), started.log
    assert (started.outputs()["status"], started.outputs()["gates"]) == ("suspended", "e2e")
    suspended = {started.outputs()["run-id"]: "api"}
    history = gh.log(SLUG, BRANCH)
    first = history[-1]
    assert first["parents"] == []  # an orphan: it shares no history with the code
    assert "README.md" in _paths_at(gh, first["sha"])
    assert MARKER_TAG in gh.refs(SLUG)

    # 2. 30 runs that finish at once, over a few minutes (GitHub takes 80 writes a minute from
    # a token; these runs are unpaced), three at a time: their commits race for the head
    def quick(i: int) -> str:
        return zuke(repo, "quick", "--service", f"q{i:02d}", env=cli)

    for batch in (range(15), range(15, QUICK_RUNS)):
        gh.advance_clock(61)
        with ThreadPoolExecutor(3) as pool:
            logs += pool.map(quick, batch)
    files = gh.files(SLUG, BRANCH)
    shards = {p: len(t.encode()) for p, t in files.items() if p.startswith("index/")}
    assert max(shards.values()) > CUT, shards  # the listing is read past GitHub's cut
    listed = zuke(repo, "runs", "list", "--json", "--limit", "100", env=cli)
    logs.append(listed)
    runs = json.loads(listed)
    quick_ids = {r["id"] for r in runs if r["rootTarget"] == "quick"}
    assert len(quick_ids) == QUICK_RUNS
    assert all(r["status"] == "succeeded" for r in runs if r["id"] in quick_ids)

    # 3. a release whose record holds a 2,000-item fan-out suspends at the gate; 4. and one
    # more (with the first: three wait)
    gh.advance_clock(61)
    for service, items in (("fan", FAN_OUT), ("web", 0)):
        out = zuke(repo, "release", "--service", service, "--items", str(items), env=cli,
                   timeout=120)  # fmt: skip
        logs.append(out)
        with branch_store(gh) as store:
            new = [
                s for s in store.list_runs(RunQuery(status="suspended")) if s.id not in suspended
            ]
        assert len(new) == 1, new
        suspended[new[0].id] = service
    fan_id = next(i for i, s in suspended.items() if s == "fan")
    [fan_record] = [t for p, t in gh.files(SLUG, BRANCH).items() if p.endswith(f"/{fan_id}.json")]
    assert len(fan_record.encode()) > 50 * CUT
    dispatched = gh.dispatched(SLUG)
    assert len(dispatched) == len(suspended)
    for run in dispatched:
        gh.complete_run(run["id"], "success")

    # 5. a paced sweep, over an hour later (what the branch spent so far is past), with a
    # write budget for two resumes and not three, and a GraphQL rate limit mid-sweep (a wait
    # over 2 s is said in the log)
    gh.advance_clock(3_900)
    budget = 2 * RESUME_COMMITS + RESUME_COMMITS - 1
    pacing = {"ZUKE_GITHUB_PACING": "on", "ZUKE_GITHUB_WRITES_PER_HOUR": str(budget)}
    paced = {**env, **pacing}
    before = len(gh.requests)
    with rate_limited_mid_sweep(gh, retry_after=3) as injected:
        swept = run_act(repo, "schedule", "sweep.yml", env=paced, cache=tmp_path / "sweep1")
    logs.append(swept.log)
    assert swept.job_succeeded(), swept.log
    assert injected.is_set() and [f["hits"] for f in gh.faults()] == [1]
    assert "zuke: GitHub rate limit: waiting 3 s (until" in swept.log
    assert swept.sweep_outputs() == {"checked": "3", "resumed": "2", "still-waiting": "0",
                                     "failed": "0", "deferred": "1"}, swept.log  # fmt: skip
    deferred = {i for i, a in _actions(swept).items() if a == "deferred"}
    assert len(deferred) == 1 and deferred <= set(suspended), swept.summary()
    # it checked the fan-out's gate, so it read that record, past the cut, whole by its blob
    fan_blob = f"/repos/{SLUG}/git/blobs/{_blob_sha(fan_record)}"
    assert fan_blob in {r["path"] for r in gh.requests[before:]}
    with branch_store(gh) as store:
        for run_id in deferred:
            found = store.get_run(run_id)
            assert found is not None and found.record.status == "suspended"

    # a sweep minutes later, within the same hour, counts the first one's commits (read from
    # the branch) and defers the rest again, writing nothing
    gh.advance_clock(600)
    commits = gh.stats()["commits"]
    later = zuke(repo, "resume", "--check", "--json", env={**cli, **pacing})
    logs.append(later)
    counts = json.loads(later[later.rfind("\n{\n") + 1 :])["counts"]  # after any body's lines
    assert (counts["checked"], counts["resumed"], counts["deferred"]) == (1, 0, 1), later
    assert gh.stats()["commits"] == commits

    # 6. an hour later by GitHub's clock the budget is free again: the next sweep finishes
    gh.advance_clock(3600)
    again = run_act(repo, "schedule", "sweep.yml", env=paced, cache=tmp_path / "sweep2")
    logs.append(again.log)
    assert again.job_succeeded(), again.log
    assert again.sweep_outputs() == {"checked": "1", "resumed": "1", "still-waiting": "0",
                                     "failed": "0", "deferred": "0"}, again.log  # fmt: skip
    assert {i for i, a in _actions(again).items() if a == "resumed"} == deferred

    # 7. every release succeeded once, the fan-out whole; nothing lost; fences never went back
    released = [line for log in (swept.log, again.log) for line in log.splitlines()
                if "released " in line and " after success" in line]  # fmt: skip
    for service in suspended.values():
        assert sum(f"released {service} after success" in line for line in released) == 1
    with branch_store(gh) as store:
        every = store.list_runs(RunQuery(limit=100))
        assert len(every) == QUICK_RUNS + len(suspended)
        assert {s.status for s in every} == {"succeeded"}
        fan = store.get_run(fan_id)
    assert fan is not None
    fanned = {n: row.status for n, row in fan.record.targets.items() if n.startswith("batch[")}
    assert len(fanned) == FAN_OUT
    assert set(fanned.values()) == {"succeeded"}
    _assert_fences_never_went_back(_locks_history(gh))
    on_branch = "".join(gh.files(SLUG, BRANCH).values())
    for text in [*logs, on_branch]:
        assert ACT_TOKEN not in text
