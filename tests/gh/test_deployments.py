"""``zuke_gh.github_deployments`` on the strict fake GitHub (issue 26 §3, §5): a release to
staging, then through an e2e gate and a two-approver gate to production, shows at each step the
deployments and statuses GitHub would show; cancel and rollback mark them inactive; a lost
answer to the deployment POST creates no second deployment; a spent write budget defers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from fixtures.fake_github import FakeGitHub
from tests.runs.support import HOUR, Harness
from zuke import Build, external_signal, parameter, target
from zuke._clock import ManualClock
from zuke._target import TargetBuilder
from zuke.runs.cancel import cancel_run
from zuke.state.memory import MemoryStateStore
from zuke_gh import GitHubClient, github_deployments

REPO = "acme/app"
SECRET = "hunter2-secret-value"


_BUDGETS: list[Budget] = []


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(repos=[REPO], clock=ManualClock(1_000_000)) as fake:
        yield fake
    while _BUDGETS:
        client = _BUDGETS.pop().client
        if client is not None:
            client.close()


class Budget:
    """The reporter's client: the fake's, with a write budget a test can spend."""

    def __init__(self, gh: FakeGitHub) -> None:
        self.gh = gh
        self.spent = False
        self.client: GitHubClient | None = None

    def __call__(self) -> GitHubClient:
        budget = self

        class Client(GitHubClient):
            def reserve_writes(self, writes: int) -> bool:
                return not budget.spent

        if self.client is None:
            self.client = Client(token=self.gh.token, base_url=self.gh.url, pacer=None,
                                 notice=None)  # fmt: skip
        return self.client


def release(store: MemoryStateStore, budget: Budget, *, fail_production: bool = False,
            timeout: str = "72h") -> type[Build]:  # fmt: skip
    """build → staging (env) → e2e (gate) → approve (gate, 2 approvals) → production (env)."""

    def build(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None)

    def staging(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.build).environment(  # type: ignore[attr-defined]
            "staging", url="https://staging.example.com").executes(lambda: None)  # fmt: skip

    def e2e(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.staging).waits_for(  # type: ignore[attr-defined]
            lambda s: s.on(external_signal("e2e-passed")).timeout(timeout)
            .on_timeout(self.rollback))  # type: ignore[attr-defined]  # fmt: skip

    def approve(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.e2e).waits_for(  # type: ignore[attr-defined]
            lambda s: s.on(external_signal("approved"))
        )

    def production(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            ctx.environment_url = "https://app.example.com"
            if fail_production:
                raise RuntimeError(f"helm said no with token {self.token.value} " + "x" * 200)  # type: ignore[attr-defined]

        return t.depends_on(self.approve).environment("production").executes(body)  # type: ignore[attr-defined]

    def rollback(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None)

    namespace: dict[str, Any] = {
        "token": parameter("a secret").secret(),
        "state_store": lambda self: store,
        "reporters": lambda self: [github_deployments(lambda d: d.repo(REPO).client(budget))],
    }
    for fn in (build, staging, e2e, approve, production, rollback):
        namespace[fn.__name__] = target(fn)
    return type("Release", (Build,), namespace)


def harness(gh: FakeGitHub, **kw: Any) -> tuple[Harness, Budget]:
    store, budget = MemoryStateStore(), Budget(gh)
    _BUDGETS.append(budget)
    sha = gh.head(REPO, "main")
    assert sha is not None
    h = Harness(release(store, budget, **kw), store, ManualClock(1_000_000),
                env={"GITHUB_SHA": sha, "GITHUB_SERVER_URL": "https://github.com",
                     "GITHUB_REPOSITORY": REPO, "GITHUB_RUN_ID": "77"})  # fmt: skip
    return h, budget


def shown(gh: FakeGitHub) -> dict[str, list[str]]:
    """Each environment's deployment and its statuses, oldest first (one deployment each)."""
    out: dict[str, list[str]] = {}
    for d in gh.deployments(REPO):
        assert d["environment"] not in out, "two deployments for one environment"
        out[d["environment"]] = [s["state"] for s in d["statuses"]]
    return out


def latest(gh: FakeGitHub, environment: str) -> dict[str, Any]:
    (d,) = [d for d in gh.deployments(REPO) if d["environment"] == environment]
    last: dict[str, Any] = d["statuses"][-1]
    return last


def test_staging_then_production_through_an_e2e_and_an_approval_gate(gh: FakeGitHub) -> None:
    h, _ = harness(gh)
    first = h.start("production", params={"token": [SECRET]})
    assert first.status == "suspended"
    assert shown(gh) == {
        "staging": ["queued", "in_progress", "success"],
        "production": ["queued", "pending"],
    }
    waiting = latest(gh, "production")
    assert waiting["description"].startswith("waiting at e2e since ")
    assert waiting["description"].endswith(" UTC for the signal 'e2e-passed'")
    assert latest(gh, "staging")["environment_url"] == "https://staging.example.com"
    assert latest(gh, "staging")["log_url"] == "https://github.com/acme/app/actions/runs/77"
    (staging,) = [d for d in gh.deployments(REPO) if d["environment"] == "staging"]
    assert staging["sha"] == h.env["GITHUB_SHA"]
    assert staging["payload"]["zuke"]["run"] == first.run_id
    assert staging["creator"] == "github-actions[bot]"

    h.resume(first.run_id, "e2e-passed")  # queued while it runs on, pending at the next gate
    assert shown(gh)["production"] == ["queued", "pending", "queued", "pending"]
    assert latest(gh, "production")["description"].startswith("waiting at approve since ")

    before = gh.stats()["requests"]
    h.sweep()  # nothing changed: not one request to GitHub
    assert gh.stats()["requests"] == before

    done = h.resume(first.run_id, "approved")
    assert done.result is not None and done.result.status == "succeeded"
    assert shown(gh) == {
        "staging": ["queued", "in_progress", "success"],
        "production": [
            "queued",
            "pending",
            "queued",
            "pending",
            "queued",
            "in_progress",
            "success",
        ],
    }
    assert latest(gh, "production")["environment_url"] == "https://app.example.com"


def test_a_failure_is_a_failure_status_redacted_and_within_140_characters(
    gh: FakeGitHub,
) -> None:
    h, _ = harness(gh, fail_production=True)
    run_id = h.start("production", params={"token": [SECRET]}).run_id
    h.resume(run_id, "e2e-passed")
    h.resume(run_id, "approved")
    last = latest(gh, "production")
    assert last["state"] == "failure"
    assert len(last["description"]) == 140 and last["description"].endswith("…")
    assert SECRET not in last["description"]
    assert all(SECRET not in (r["body"] or "") for r in gh.requests)


def test_cancel_marks_every_deployment_of_the_run_inactive(gh: FakeGitHub) -> None:
    h, _ = harness(gh)
    run_id = h.start("production").run_id
    result = cancel_run(h.store, run_id, actor="ops", build=h.build, env=h.env)
    assert result.status == "cancelled" and result.warnings == []
    assert shown(gh) == {
        "staging": ["queued", "in_progress", "success", "inactive"],
        "production": ["queued", "pending", "inactive"],
    }
    assert latest(gh, "staging")["description"].startswith("cancelled: run ")


def test_a_rollback_by_a_gates_timeout_marks_them_inactive(gh: FakeGitHub) -> None:
    h, _ = harness(gh, timeout="1h")
    run_id = h.start("production").run_id
    h.clock.advance(2 * HOUR)
    h.sweep()
    assert h.record(run_id).status == "cancelled"
    assert shown(gh)["staging"][-1] == "inactive"
    assert shown(gh)["production"][-1] == "inactive"
    assert latest(gh, "production")["description"].startswith("rolled back: run ")


def test_a_lost_answer_to_the_deployment_post_creates_no_second_deployment(
    gh: FakeGitHub,
) -> None:
    h, _ = harness(gh)
    gh.inject("/repos/*/deployments", status=502, method="POST", after=True)  # made, answer lost
    run_id = h.start("production").run_id
    assert any("reporter 'github-deployments' failed on created" in w for w in h.warnings)
    # the next report found the intent without an id, listed, and adopted zuke's own
    assert shown(gh) == {
        "staging": ["queued", "in_progress", "success"],
        "production": ["queued", "pending"],
    }
    notes = [e.detail for e in h.record(run_id).events if e.tool == "report:github-deployments"]
    assert any(n and n.endswith("adopted") for n in notes)


def test_after_a_lost_answer_only_zukes_own_deployment_is_adopted_never_a_copy(
    gh: FakeGitHub,
) -> None:
    h, budget = harness(gh)
    budget.spent = True  # the run starts with nothing on GitHub yet
    run_id = h.start("production").run_id
    mallory = gh.add_user_token("mallory")
    gh.set_permission(REPO, "mallory", "write")
    with GitHubClient(token=mallory, base_url=gh.url, pacer=None, notice=None) as hers:
        copied = hers.post("/repos/{owner}/{repo}/deployments", owner="acme", repo="app", json={
            "ref": h.env["GITHUB_SHA"], "environment": "staging", "auto_merge": False,
            "required_contexts": [], "payload": {"zuke": {"run": run_id}},
        }).body["id"]  # fmt: skip
    budget.spent = False
    gh.inject("/repos/*/deployments", status=502, method="POST", after=True)  # ours: lost
    h.sweep()
    h.sweep()  # the intent without an id: listed, and only zuke's own adopted
    staging = [d for d in gh.deployments(REPO) if d["environment"] == "staging"]
    assert len(staging) == 2  # mallory's and the one zuke made: no third
    (ours,) = [d for d in staging if d["id"] != copied]
    assert ours["creator"] == "github-actions[bot]" and ours["statuses"]
    assert next(d for d in staging if d["id"] == copied)["statuses"] == []


def test_a_spent_write_budget_defers_the_statuses_and_a_later_sweep_sends_them(
    gh: FakeGitHub,
) -> None:
    h, budget = harness(gh)
    budget.spent = True
    run_id = h.start("production").run_id
    assert gh.deployments(REPO) == []
    assert any("deferred: GitHub's write budget is spent" in w for w in h.warnings)
    budget.spent = False
    h.sweep()
    assert shown(gh) == {"staging": ["success"], "production": ["pending"]}
    assert h.record(run_id).status == "suspended"


def test_a_failed_status_write_never_fails_the_release_and_the_next_sweep_sends_it(
    gh: FakeGitHub,
) -> None:
    h, _ = harness(gh)
    gh.inject("/repos/*/deployments/*/statuses", status=502, method="POST", times=None)
    result = h.start("production")
    assert result.status == "suspended"  # the release went on
    failures = [w for w in h.warnings if "reporter 'github-deployments' failed" in w]
    assert failures and "the next sweep reports it again" in failures[0]
    assert all(not d["statuses"] for d in gh.deployments(REPO))
    gh.clear_faults()
    h.sweep()
    assert shown(gh) == {"staging": ["success"], "production": ["pending"]}


def test_required_contexts_are_sent_and_a_failing_check_is_reported_not_raised(
    gh: FakeGitHub,
) -> None:
    store, budget = MemoryStateStore(), Budget(gh)
    _BUDGETS.append(budget)
    sha = gh.set_commit_status(REPO, "main", "ci/build", "failure")
    base = release(store, budget)
    cls = type("Checked", (base,), {"reporters": lambda self: [github_deployments(
        lambda d: d.repo(REPO).required_contexts("ci/build").client(budget))]})  # fmt: skip
    h = Harness(cls, store, ManualClock(1_000_000), env={"GITHUB_SHA": sha})
    assert h.start("production").status == "suspended"
    assert gh.deployments(REPO) == []  # GitHub refused: the check failed
    assert any("Commit status checks failed" in w for w in h.warnings)
    posts = [r for r in gh.requests if r["method"] == "POST" and r["path"].endswith("/deployments")]
    assert json.loads(posts[0]["body"])["required_contexts"] == ["ci/build"]


@pytest.mark.parametrize(
    ("configure", "says"),
    [
        (lambda d: d.repo("not a repo"), "github_deployments:"),
        (lambda d: d.required_contexts(""), "required_contexts() takes check names"),
        (lambda d: d.client("nope"), "client() takes a callable"),
    ],
)
def test_bad_settings_are_definition_errors(configure: Any, says: str) -> None:
    from zuke import BuildDefinitionError

    with pytest.raises(BuildDefinitionError, match=says.replace("(", r"\(").replace(")", r"\)")):
        github_deployments(configure)
