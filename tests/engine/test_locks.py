"""Cross-run locks and the run lease, in-process against the memory store."""

from __future__ import annotations

import asyncio
import threading

import pytest

from zuke import (
    Build,
    Context,
    LockAcquired,
    LockConflictError,
    LockHeld,
    LockHolder,
    StateStore,
    StoreUnavailableError,
    execute,
    lock_key,
    parameter,
    target,
)
from zuke._engine.claims import lease_key
from zuke.state.memory import MemoryStateStore

HOLDER = LockHolder(actor="bob", run_id="other-run", since="2026-01-01T00:00:00.000Z")


def locked_build(store: StateStore, configure, body=lambda: None):
    class Locked(Build):
        repo = parameter("repo").default("org/api")

        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            return t.lock(lambda s: configure(self, s)).executes(body)

    return Locked


def by_repo(build, s):
    return s.lock_key("deploy", build.repo.value).with_ttl("4h")


def test_lock_key_sanitises_and_joins() -> None:
    assert lock_key("deploy", "org/api name", "", 3, "ü") == "deploy-org_api_name-3-_"


def test_the_lock_is_held_while_the_body_runs_and_released_after() -> None:
    store = MemoryStateStore()
    seen: dict[str, object] = {}

    def body(ctx: Context) -> None:
        seen["during"] = store.acquire_lock("deploy-org_api", HOLDER, 1000)
        assert ctx.lock is not None
        seen["fence"] = ctx.lock.fence
        seen["key"] = ctx.lock.key

    result = execute(locked_build(store, by_repo, body), ["deploy"], env={})
    assert result.ok
    held = seen["during"]
    assert isinstance(held, LockHeld) and held.holder.run_id == result.run_id
    assert seen["key"] == "deploy-org_api"
    assert isinstance(store.acquire_lock("deploy-org_api", HOLDER, 1000), LockAcquired)


def test_fences_increase_across_runs() -> None:
    store = MemoryStateStore()
    fences: list[int] = []
    build = locked_build(store, by_repo, lambda ctx: fences.append(ctx.lock.fence))
    for _ in range(3):
        assert execute(build, ["deploy"], env={}).ok
    assert fences == sorted(fences) and len(set(fences)) == 3


def test_a_held_lock_fails_the_target_with_default_guidance() -> None:
    store = MemoryStateStore()
    store.acquire_lock(
        "deploy-org_api",
        LockHolder("bob", "run-7", "2026-01-01T00:00:00.000Z", "https://ci/run/7"),
        60_000,
    )
    ran: list[str] = []
    result = execute(locked_build(store, by_repo, lambda: ran.append("x")), ["deploy"], env={})
    assert ran == [] and result.status == "failed"
    error = result.outcomes["deploy"].error or ""
    assert error.startswith('Lock "deploy-org_api" is held by bob (run run-7) since 2026-01-01')
    assert "https://ci/run/7" in error and "zuke cancel run-7" in error
    found = store.get_run(result.run_id)
    assert found is not None and found.record.targets["deploy"].error == error


def test_on_conflict_renders_the_guidance() -> None:
    store = MemoryStateStore()
    store.acquire_lock("deploy-org_api", HOLDER, 60_000)

    def configure(build, s):
        return (
            s.lock_key("deploy", build.repo.value)
            .with_ttl("30m")
            .on_conflict(
                lambda h: f"{build.repo.value} is being deployed by {h.actor} (run {h.run_id})."
            )
        )

    result = execute(locked_build(store, configure), ["deploy"], env={})
    assert result.outcomes["deploy"].error == "org/api is being deployed by bob (run other-run)."


def test_the_conflict_error_carries_the_holder() -> None:
    error = LockConflictError(HOLDER, "guidance")
    assert error.holder.actor == "bob" and str(error) == "guidance"


@pytest.mark.parametrize(
    ("configure", "message"),
    [
        (lambda b, s: s.key("a/b").with_ttl("1h"), "lock key 'a/b' is not filename-safe"),
        (lambda b, s: s.key("..").with_ttl("1h"), "lock key '..' is not filename-safe"),
        (lambda b, s: s.key("a b").with_ttl("1h"), "lock key 'a b' is not filename-safe"),
        (lambda b, s: s.key("a\x00b").with_ttl("1h"), "is not filename-safe"),
        (lambda b, s: s.key("ok").with_ttl(0), "lock TTL: 0 must be more than zero"),
        (lambda b, s: s.key("ok").with_ttl(-5), "lock TTL: -5 must be more than zero"),
        (lambda b, s: s.key("ok").with_ttl("soon"), "lock TTL: 'soon' is not a duration"),
        (lambda b, s: s.key("ok"), "the lock sets no TTL"),
        (lambda b, s: s.with_ttl("1h"), "the lock sets no key"),
    ],
)
def test_bad_lock_settings_fail_the_load_with_a_clear_message(configure, message) -> None:
    from zuke import BuildDefinitionError

    store = MemoryStateStore()
    with pytest.raises(BuildDefinitionError) as info:  # when the build loads: nothing ran
        execute(locked_build(store, configure), ["deploy"], env={})
    assert message in str(info.value)
    assert store.list_runs() == []


class DownStore(MemoryStateStore):
    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int):
        if key.startswith("zuke-run-"):
            return super().acquire_lock(key, holder, ttl_ms)
        raise StoreUnavailableError("state: the state service answered 503")


def test_a_store_down_at_acquisition_fails_with_the_store_error_not_a_conflict() -> None:
    result = execute(locked_build(DownStore(), by_repo), ["deploy"], env={})
    error = result.outcomes["deploy"].error or ""
    assert error == "state: the state service answered 503"


def test_the_lock_is_released_when_the_body_fails() -> None:
    store = MemoryStateStore()
    result = execute(locked_build(store, by_repo, lambda: 1 / 0), ["deploy"], env={})
    assert result.status == "failed"
    assert isinstance(store.acquire_lock("deploy-org_api", HOLDER, 1000), LockAcquired)


def test_ci_run_url_is_filled_from_github_variables() -> None:
    store = MemoryStateStore()
    seen: dict[str, object] = {}

    def body() -> None:
        seen["held"] = store.acquire_lock("deploy-org_api", HOLDER, 1000)

    env = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "acme/app",
           "GITHUB_RUN_ID": "42", "GITHUB_ACTOR": "octo", "GITHUB_ACTIONS": "true"}  # fmt: skip
    execute(locked_build(store, by_repo, body), ["deploy"], env=env)
    held = seen["held"]
    assert isinstance(held, LockHeld)
    assert held.holder.run_url == "https://github.com/acme/app/actions/runs/42"
    assert held.holder.actor == "octo"


def test_the_run_holds_its_lease_while_running_and_gives_it_back() -> None:
    store = MemoryStateStore()
    seen: dict[str, object] = {}

    def body(ctx: Context) -> None:
        seen["lease"] = store.acquire_lock(lease_key(ctx.run_id), HOLDER, 1000)
        found = store.get_run(ctx.run_id)
        assert found is not None
        seen["locks"] = sorted(found.record.locks)

    result = execute(locked_build(store, by_repo, body), ["deploy"], env={})
    assert isinstance(seen["lease"], LockHeld)
    assert seen["locks"] == ["deploy-org_api", lease_key(result.run_id)]
    assert isinstance(store.acquire_lock(lease_key(result.run_id), HOLDER, 1000), LockAcquired)
    found = store.get_run(result.run_id)
    assert found is not None and found.record.locks == {}


class RenewalStore(MemoryStateStore):
    """Renewals of ``key`` are refused or fail once ``mode`` is set."""

    def __init__(self, key_prefix: str) -> None:
        super().__init__()
        self.key_prefix = key_prefix
        self.mode: str | None = None
        self.renewed = threading.Event()

    def renew_lock(self, key: str, token: str, ttl_ms: int) -> bool:
        if key.startswith(self.key_prefix) and self.mode == "refuse":
            self.renewed.set()
            return False
        if key.startswith(self.key_prefix) and self.mode == "fail":
            self.renewed.set()
            raise StoreUnavailableError("state: 503 from the state service")
        return super().renew_lock(key, token, ttl_ms)


#: how long a body waits to be stopped before it finishes (and the test fails)
STOP_BOUND_S = 30.0


def renewal_build(store: RenewalStore, after_renewal: list[str]):
    async def body(ctx: Context) -> None:
        store.mode = store.mode or "refuse"
        deadline = asyncio.get_running_loop().time() + 10
        while not store.renewed.is_set():
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        # Only the stop ends this in time: a refused renewal stops the target at once, a
        # failing one by the TTL less its margin (under 1 s). A fixed beat (0.3 s) here
        # raced the stop on a loaded machine; a body nobody stops finishes and is seen.
        await asyncio.sleep(STOP_BOUND_S)
        after_renewal.append("body finished")

    class Renewing(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def deploy(self, t):
            return t.lock(lambda s: s.key("res").with_ttl(1_000)).executes(body)

        @target
        def after(self, t):
            return t.depends_on(self.deploy).executes(lambda: after_renewal.append("after"))

    return Renewing


def test_a_refused_lock_renewal_stops_the_target_and_the_run() -> None:
    store = RenewalStore("res")
    after: list[str] = []
    result = execute(renewal_build(store, after), ["after"], env={})
    assert result.status == "failed" and after == []
    assert "was lost while this target ran" in (result.outcomes["deploy"].error or "")
    assert result.outcomes["after"].status == "skipped"


def test_a_lock_whose_renewals_keep_failing_stops_its_target_before_the_ttl() -> None:
    # Failing renewals are retried, but only until the TTL less its margin: then the
    # claim counts as lost (tests/engine/test_fail_closed.py: one that recovers goes on).
    store = RenewalStore("res")
    store.mode = "fail"
    after: list[str] = []
    warnings: list[str] = []
    from zuke._engine.run import RunOptions, execute_async

    options = RunOptions(targets=["after"], env={}, on_warning=warnings.append)
    result = asyncio.run(execute_async(renewal_build(store, after), options))
    assert result.status == "failed" and after == []
    assert "could not be renewed" in (result.outcomes["deploy"].error or "")
    assert any("renewing res failed" in w for w in warnings)


def test_a_refused_lease_renewal_stops_the_run_without_settling_it() -> None:
    store = RenewalStore("zuke-run-")
    after: list[str] = []

    class Leased(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def work(self, t):
            return t.executes(self._work)

        async def _work(self) -> None:
            store.mode = "refuse"
            await asyncio.Event().wait()  # only a stop ends this

        @target
        def after(self, t):
            return t.depends_on(self.work).executes(lambda: after.append("after"))

    result = execute(Leased, ["after"], env={"ZUKE_RUN_LEASE_TTL": "1s"})
    assert result.status == "failed" and after == []
    assert "its lease was taken over by another process" in (result.stop_reason or "")
    found = store.get_run(result.run_id)
    assert found is not None and found.record.status == "running"  # left for the new holder


class NoLeaseStore(MemoryStateStore):
    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int):
        if self.failures:
            self.failures -= 1
            raise StoreUnavailableError("state: connection refused")
        return super().acquire_lock(key, holder, ttl_ms)


def test_a_store_that_cannot_grant_the_lease_fails_the_run_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from zuke._engine import claims

    monkeypatch.setattr(claims, "LEASE_ACQUIRE_BACKOFF_S", (0.0, 0.0))
    ran: list[str] = []
    store = NoLeaseStore(failures=10)

    class Plain(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def a(self, t):
            return t.executes(lambda: ran.append("a"))

    with pytest.raises(StoreUnavailableError, match="Could not claim run"):
        execute(Plain, ["a"], env={})
    assert ran == [] and store.list_runs() == []


def test_a_store_that_recovers_on_a_retry_lets_the_run_proceed() -> None:
    store = NoLeaseStore(failures=1)

    class Plain(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def a(self, t):
            return t.executes(lambda: None)

    assert execute(Plain, ["a"], env={}).ok


def test_a_timed_out_body_keeps_its_lock_until_its_thread_returns() -> None:
    store = MemoryStateStore()
    told_to_stop = threading.Event()
    finish_body = threading.Event()
    seen: dict[str, object] = {}

    def stuck(ctx: Context) -> None:
        ctx.cancelled.wait(10)  # the timeout tells the attempt to stop...
        told_to_stop.set()
        finish_body.wait(10)  # ...but it takes its time to return

    async def watcher(ctx: Context) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while not told_to_stop.is_set():
            assert loop.time() < deadline
            await asyncio.sleep(0.01)
        seen["after_timeout"] = store.acquire_lock("guarded-key", HOLDER, 60_000)
        seen["settled_early"] = ctx.outcome_of("guarded")
        finish_body.set()

    class Guarded(Build):
        def state_store(self) -> StateStore:
            return store

        @target
        def guarded(self, t):
            return t.lock(lambda s: s.key("guarded-key").with_ttl("1h")).timeout(50).executes(stuck)

        @target
        def watch(self, t):
            return t.executes(watcher)

    result = execute(Guarded, ["guarded", "watch"], parallel=2, env={})
    assert result.outcomes["guarded"].status == "failed"
    assert "timed out" in (result.outcomes["guarded"].error or "")
    assert result.outcomes["watch"].status == "succeeded"
    assert isinstance(seen["after_timeout"], LockHeld)  # still guarded while the thread ran
    assert seen["settled_early"] is None  # the target settles only once its body returned
    assert isinstance(store.acquire_lock("guarded-key", HOLDER, 60_000), LockAcquired)
