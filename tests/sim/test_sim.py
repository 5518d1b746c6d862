"""The deterministic simulation of the run lifecycle (docs/simulation.md).

``test_seeds`` is what CI runs: 2,000 seeds, each a different interleaving of
owners, resumers, sweepers, cancellers and MCP calls with crashes, stalls and
cut-offs, checked against every invariant of :mod:`tests.sim.invariants`. A
failing seed is printed with the line that reproduces it by its number alone.
"""

from __future__ import annotations

import contextvars
import os
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.sim.campaign import run_many, run_parallel
from tests.sim.conftest import setting
from tests.sim.invariants import Exec, Invariants
from tests.sim.procs import Actor, current_actor
from tests.sim.scenario import FAMILIES, DrawChooser, make_scenario, run_seed
from zuke._clock import ManualClock
from zuke._engine.context import LockInfo
from zuke.state._protocol import LockAcquired, LockHeld, LockHolder, Written
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunRecord

pytestmark = pytest.mark.sim


def _ignore(config: pytest.Config) -> frozenset[str]:
    return frozenset(filter(None, (setting(config, "--sim-ignore") or "").split(",")))


def _report(summary_text: str, failures: list[str]) -> str:
    return "\n".join([summary_text, *failures])


@pytest.mark.timeout(900)
def test_seeds(pytestconfig: pytest.Config) -> None:
    """CI's seeds: no invariant breaks in any of them."""
    start = int(setting(pytestconfig, "--sim-start") or 0)
    count = int(setting(pytestconfig, "--sim-seeds") or 2000)
    workers = int(setting(pytestconfig, "--sim-workers") or min(2, os.cpu_count() or 1))
    summary = run_parallel(start, count, workers=workers, ignore=_ignore(pytestconfig))
    print(summary.describe())
    if summary.broken:
        pytest.fail(_report(summary.describe(), [f.describe() for f in summary.failures]), False)


def test_one_seed(pytestconfig: pytest.Config) -> None:
    """``ZUKE_SIM_SEED=N pytest tests/sim -k one_seed``: one seed, its whole schedule printed."""
    seed = setting(pytestconfig, "--sim-seed")
    if seed is None:
        pytest.skip("set ZUKE_SIM_SEED (or --sim-seed) to run one seed")
    result = run_seed(int(seed), keep_moves=True, ignore=_ignore(pytestconfig))
    print("\n".join(result.moves))
    if result.violations:
        pytest.fail(result.describe(), pytrace=False)


@pytest.mark.timeout(0)
def test_soak(pytestconfig: pytest.Config) -> None:
    """``ZUKE_SIM_SOAK=600 pytest tests/sim -k soak``: seeds for as long as asked."""
    seconds = setting(pytestconfig, "--sim-soak")
    if seconds is None:
        pytest.skip("set ZUKE_SIM_SOAK (or --sim-soak) to the seconds to run")
    start = int(setting(pytestconfig, "--sim-start") or 0)
    seeds = iter(range(start, 2**62))
    summary = run_many(seeds, ignore=_ignore(pytestconfig), until=time.monotonic() + float(seconds))
    print(summary.describe())
    if summary.broken:
        pytest.fail(_report(summary.describe(), [f.describe() for f in summary.failures]), False)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(seed=st.integers(0, 10**6), data=st.data())
def test_drawn_schedules(seed: int, data: st.DataObject) -> None:
    """Hypothesis draws every scheduling choice: a failure shrinks to a short interleaving."""
    chooser = DrawChooser(lambda n: data.draw(st.integers(0, n - 1)))
    result = run_seed(seed, chooser, keep_moves=True)
    if result.violations:
        pytest.fail("\n".join([*result.moves, result.describe()]), pytrace=False)


# -- the harness itself ---------------------------------------------------------------------


def test_a_seed_is_one_interleaving() -> None:
    """The same seed takes the same moves and finds the same violations, every time."""
    for seed in range(len(FAMILIES)):
        first, again = run_seed(seed, keep_moves=True), run_seed(seed, keep_moves=True)
        assert first.moves == again.moves
        assert first.schedule == again.schedule
        assert [str(v) for v in first.violations] == [str(v) for v in again.violations]
        assert first.steps > 5


def test_a_campaign_runs_the_scenarios_asked_for() -> None:
    """``python -m tests.sim --seeds N --race`` (``--hot``, ``--fanout``): every seed's
    scenario of that kind, the same interleavings as the seeds run one by one."""
    seeds = range(30, 33)
    for kind in ("hot", "race", "fanout"):
        summary = run_many(seeds, variant=frozenset({kind}))
        alone = {run_seed(seed, **{kind: True}).schedule for seed in seeds}  # type: ignore[arg-type]
        assert summary.schedules == alone
    assert run_many(seeds).schedules == {run_seed(seed).schedule for seed in seeds}
    assert run_many(seeds).schedules != run_many(seeds, variant=frozenset({"race"})).schedules


def test_families_take_turns() -> None:
    assert [make_scenario(seed).family for seed in range(5)] == list(FAMILIES)


class _FreeForAll(MemoryStateStore):
    """A planted bug: a store that grants a lock however it is held."""

    def acquire_lock(self, key: str, holder: LockHolder, ttl_ms: int) -> LockAcquired | LockHeld:
        if not key.startswith("zuke-"):
            self._claims.pop(key, None)  # forget the holder, keep nothing
            self._fence_floor += 1
        return super().acquire_lock(key, holder, ttl_ms)


def test_a_planted_double_holder_is_found() -> None:
    """With a store that hands out held locks, two deploys overlap and a seed says so."""
    broken = set()
    for seed in range(2, 200, len(FAMILIES)):  # the "locks" family
        result = run_seed(seed, store=_FreeForAll)
        broken |= {v.invariant for v in result.violations}
        if "lock-exclusive" in broken:
            break
    assert "lock-exclusive" in broken


def _as(name: str, check: Callable[[], object]) -> None:
    """Run ``check`` as the actor ``name`` (the ledger names who acted)."""
    context = contextvars.copy_context()
    context.run(current_actor.set, Actor(name))
    context.run(check)


def _freed(inv: Invariants, store: MemoryStateStore, key: str, token: str | None,
           actor: str) -> None:  # fmt: skip
    """``actor`` releases ``key`` with ``token`` (``None``: breaks it), and the ledger is
    told what the claim was just before."""
    before = inv.view.claim(key)
    if token is None:
        store.break_lock(key)
    else:
        store.release_lock(key, token)
    inv.freeing(key, before, "released" if token else "broke", Actor(actor))


def _take(inv: Invariants, store: MemoryStateStore, actor: str) -> str:
    taken = store.acquire_lock("prod", LockHolder(actor, "run-1", "t0"), 30_000)
    assert isinstance(taken, LockAcquired)
    inv.granted("prod", taken.token, Actor(actor))
    return taken.token


def test_a_live_claim_freed_by_another_is_named() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    inv = Invariants(store)
    _freed(inv, store, "prod", _take(inv, store, "a"), "a")  # its own
    assert inv.violations == []
    stale = _take(inv, store, "a")
    _freed(inv, store, "prod", None, "reaper")  # live, and not its
    assert [v.invariant for v in inv.violations] == ["claims-respected"]
    _take(inv, store, "b")
    _freed(inv, store, "prod", stale, "a")  # a stale token: the store frees nothing
    assert len(inv.violations) == 1
    clock.advance(30_000)
    _freed(inv, store, "prod", None, "reaper")  # lapsed: anyone may
    assert len(inv.violations) == 1


def test_a_stale_token_that_frees_a_live_claim_is_named() -> None:
    """Judged by what the store did, not by the token asked with: a release that frees the
    claim of another (the planted ``release-any-token``) is caught."""
    from tests.sim.mutations import BY_NAME, applied

    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    inv = Invariants(store)
    stale = _take(inv, store, "a")
    _freed(inv, store, "prod", None, "a")
    _take(inv, store, "b")
    with applied(BY_NAME["release-any-token"]):
        _freed(inv, store, "prod", stale, "a")
    assert [v.invariant for v in inv.violations] == ["claims-respected"]
    assert "held by b" in inv.violations[0].detail


def test_a_run_leaving_its_end_is_named() -> None:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    inv = Invariants(store)
    record = RunRecord(id="run-1", build="B", root_target="t", status="succeeded", actor="a",
                       created_at="2024-01-01T00:00:00.000Z",
                       updated_at="2024-01-01T00:00:00.000Z")  # fmt: skip
    written = store.create_run(record)
    inv.observe()
    assert inv.violations == []
    assert isinstance(written, Written)
    store.put_run(replace(record, status="running"), expected_version=written.version)
    inv.observe()
    assert [v.invariant for v in inv.violations] == ["terminal-once"]


def test_a_stale_fence_is_refused_not_acted_on() -> None:
    """A paused holder that wakes after a takeover acts with an old fence: refused, counted."""
    inv = Invariants(MemoryStateStore(clock=ManualClock()))
    runs: list[Exec] = []
    _as("a", lambda: runs.append(inv.enter("run-1", "deploy", LockInfo("prod", 1))))
    _as("b", lambda: runs.append(inv.enter("run-2", "deploy", LockInfo("prod", 2))))
    assert [v.invariant for v in inv.violations] == ["lock-exclusive"]  # "a" was not stalled
    assert inv.act(runs[0]) is False
    assert inv.act(runs[1]) is True
    assert inv.fenced == 1


def test_a_promote_after_another_run_deployed_with_the_kept_key_is_named() -> None:
    """held-exclusive: a run's promote must run under the key its deploy kept."""
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    inv = Invariants(store)
    taken = store.acquire_lock("prod", LockHolder("a", "run-1", "t0"), 30_000)
    assert isinstance(taken, LockAcquired)
    _as("a", lambda: inv.exit(inv.enter("run-1", "deploy", LockInfo("prod", taken.fence))))
    _as("a", lambda: inv.held_enter("run-1", "prod"))  # still its own: fine
    assert inv.violations == []
    store.break_lock("prod")
    again = store.acquire_lock("prod", LockHolder("b", "run-2", "t1"), 30_000)
    assert isinstance(again, LockAcquired)
    _as("b", lambda: inv.exit(inv.enter("run-2", "deploy", LockInfo("prod", again.fence))))
    _as("c", lambda: inv.held_enter("run-1", "prod"))
    assert [v.invariant for v in inv.violations] == ["held-exclusive", "held-exclusive"]


def test_a_finished_run_that_keeps_a_lock_is_named_and_its_lease_holder_may_free_it() -> None:
    """finished-holds-nothing, and claims-respected for a lock the run keeps: whoever holds
    the run's lease may give it back."""
    from zuke.state._protocol import lease_key
    from zuke.state.records import HeldLock

    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    inv = Invariants(store)
    kept = store.acquire_lock("prod", LockHolder("a", "run-1", "t0"), 30_000)
    lease = store.acquire_lock(lease_key("run-1"), LockHolder("s", "run-1", "t0"), 30_000)
    assert isinstance(kept, LockAcquired) and isinstance(lease, LockAcquired)
    inv.granted("prod", kept.token, Actor("owner"))
    inv.granted(lease_key("run-1"), lease.token, Actor("sweeper"))
    row = HeldLock("deploy", "promote", 30_000, kept.fence)
    record = RunRecord(id="run-1", build="B", root_target="t", status="suspended", actor="a",
                       created_at="2024-01-01T00:00:00.000Z",
                       updated_at="2024-01-01T00:00:00.000Z", locks={"prod": kept.token},
                       held={"prod": row})  # fmt: skip
    written = store.create_run(record)
    assert isinstance(written, Written)
    inv.observe()
    live = inv.view.claim("prod")
    assert live is not None
    gone = replace(live, token=None, holder=None, expires_at=None)  # as after its release
    store_claims = store._claims
    store_claims["prod"] = gone
    inv.freeing("prod", live, "released", Actor("sweeper"))  # holds the run's lease
    assert inv.violations == []
    inv.freeing("prod", live, "released", Actor("stranger"))
    assert [v.invariant for v in inv.violations] == ["claims-respected"]
    store_claims["prod"] = live
    store.put_run(replace(record, status="succeeded"), expected_version=written.version)
    inv.observe()
    assert [v.invariant for v in inv.violations][-1] == "finished-holds-nothing"
    inv.settle({})
    assert [v.invariant for v in inv.violations][-1] == "finished-holds-nothing"
    assert "still holds prod in the store" in inv.violations[-1].detail


def test_a_fault_after_the_work_finished_excuses_no_second_run_of_it() -> None:
    """body-once and compensation-iff excuse a repeat only when the first actor was faulted
    before its work finished (the record said so), not whenever it was faulted."""
    inv = Invariants(MemoryStateStore(clock=ManualClock()))
    first, second, third = Actor("a"), Actor("b"), Actor("c")
    for actor in (first, second, third):
        inv.actors[actor.name] = actor

    def compensate(actor: Actor, *, finish: bool) -> None:
        context = contextvars.copy_context()
        context.run(current_actor.set, actor)
        context.run(inv.compensation, "run-1", "deploy")
        if finish:
            context.run(inv.compensated, "run-1", "deploy")

    compensate(first, finish=False)
    inv.faulting(first)  # crashed mid-compensation: a second one is excused
    first.faulted = True
    compensate(second, finish=True)
    assert inv.violations == []
    inv.faulting(second)  # crashed after it finished: no excuse
    second.faulted = True
    compensate(third, finish=True)
    assert [v.invariant for v in inv.violations] == ["compensation-iff"]
    assert "after b did" in inv.violations[0].detail
