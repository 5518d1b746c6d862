"""The simulation over Postgres (tests.sim.pg): the server's clock is the simulation's, a
few seeds run over ``PostgresStateStore`` with every fault and invariant, and a bug in the
store's own lock SQL is caught. They need a cluster (``pg_cluster``'s rules: skipped
without Postgres, failed when ``ZUKE_REQUIRE_POSTGRES=1``)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from tests.sim import pg
from tests.sim.campaign import run_many
from tests.sim.mutations import BY_NAME, hunt
from tests.sim.scenario import run_seed
from zuke._clock import ManualClock
from zuke.state._protocol import LockAcquired, LockHeld, LockHolder

pytestmark = pytest.mark.sim

#: a few seeds of every family, some with crashes and stalls (leases lapse on the server)
SEEDS = range(12)


def test_the_servers_clock_is_the_simulations(sim_pg_url: str) -> None:
    """A claim lapses when the simulated clock passes its TTL, however little real time
    went by; what the server stamps by default (a grant's ``at``) is simulated time too."""
    clock = ManualClock()
    with pg.opened(clock, seed=0) as store:
        first = store.acquire_lock("prod", LockHolder("a", "run-1", "t0"), 30_000)
        assert isinstance(first, LockAcquired)
        clock.advance(29_999)
        assert isinstance(
            store.acquire_lock("prod", LockHolder("b", "run-2", "t1"), 30_000), LockHeld
        )
        clock.advance(1)
        second = store.acquire_lock("prod", LockHolder("b", "run-2", "t1"), 30_000)
        assert isinstance(second, LockAcquired) and second.fence == first.fence + 1
        view = store.view()
        claim = view.claim("prod")
        assert claim is not None and claim.expires_at == clock.now_ms() + 30_000
        rows = view._rows(
            "SELECT floor(extract(epoch FROM at) * 1000)::bigint FROM zuke_lock_grants"
            " WHERE ns = %s ORDER BY fence",
            (store.namespace,),
        )
        assert [int(r[0]) for r in rows] == [clock.now_ms() - 30_000, clock.now_ms()]


def test_the_store_reads_no_other_clock() -> None:
    """The premise of tests.sim.pg: every "now" of the Postgres store's SQL is
    ``clock_timestamp()`` (which the simulation overrides), none another server time
    function (``now()`` and its kin would need overriding too), and no lease decision
    reads the client's wall clock."""
    root = Path(__file__).resolve().parents[2] / "zuke" / "state"
    sources = {p.name: p.read_text() for p in [*root.glob("_pg*.py"), root / "postgres.py"]}
    other = re.compile(r"\bnow\(\)|current_timestamp|statement_timestamp|transaction_timestamp|"
                       r"localtimestamp|current_time\b|time\.time\(", re.IGNORECASE)  # fmt: skip
    found = {name: other.findall(text) for name, text in sources.items() if other.search(text)}
    assert found == {}
    assert "clock_timestamp()" in sources["_pg_locks.py"]


def test_postgres_seeds_break_nothing(sim_pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A few of CI's seeds over Postgres, with the same faults and every invariant."""
    monkeypatch.setenv("ZUKE_SIM_STORE", "postgres")
    summary = run_many(SEEDS)
    assert summary.seeds == len(SEEDS)
    assert summary.broken == {}, "\n".join(f.describe() for f in summary.failures)
    assert summary.exhausted == 0


def test_postgres_hot_and_race_seeds_break_nothing(sim_pg_url: str) -> None:
    """A few hot seeds (a directed stall at a holder's compare-and-swap) and the race
    seeds that once broke ``exit-truthful`` (a slow continuation beside a watcher), over
    Postgres."""
    for seed in (1, 6, 11):
        result = run_seed(seed, store="postgres", hot=True)
        assert result.violations == [], result.describe()
    for seed in (59, 64, 69):
        result = run_seed(seed, store="postgres", race=True)
        assert result.violations == [], result.describe()


def test_a_postgres_seed_takes_the_memory_seeds_moves(sim_pg_url: str) -> None:
    """The store answers as the memory store does: a seed over Postgres takes the same
    moves (the same schedule hash). The server's answers are real, the moves the seed's."""
    for seed in (1, 2, 7):
        over_pg = run_seed(seed, store="postgres")
        assert over_pg.scenario.store == "postgres"
        assert over_pg.schedule == run_seed(seed, store="memory").schedule


def test_with_the_servers_own_clock_no_lease_lapses(
    sim_pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness's own check: with the server's clock left where the seed began, a gone
    owner's lease never lapses on the server, and the drain finds runs nobody can take."""
    original = pg.PgSim.set_clock

    def frozen(self: pg.PgSim, now_ms: int) -> None:
        if self._set is None or self._set == 0:
            original(self, now_ms)

    monkeypatch.setattr(pg.PgSim, "set_clock", frozen)
    monkeypatch.setenv("ZUKE_SIM_STORE", "postgres")
    summary = run_many(SEEDS)
    print(summary.describe())
    assert summary.broken, "no seed noticed the server's clock standing still"


def test_a_bug_in_the_postgres_lock_sql_is_caught(sim_pg_url: str) -> None:
    """``pg-release-any-token`` (the store's release without its token) is caught by
    ``claims-respected`` over Postgres."""
    caught = hunt(BY_NAME["pg-release-any-token"])
    print(caught.describe())
    assert caught.seed is not None, caught.describe()
    assert "claims-respected" in caught.invariants


@pytest.mark.parametrize("name", ["no-reaping", "kept-lock-released"])
def test_the_engines_lease_and_lock_bugs_are_caught_over_postgres(
    sim_pg_url: str, name: str
) -> None:
    """Two of the catalogue's lease and lock mutations of the engine (a gone owner's run
    never reaped: the leases must lapse on the server; a kept lock given back early), hunted
    over Postgres: caught by the seed that catches them in memory."""
    mutation = BY_NAME[name]
    caught = hunt(replace(mutation, store="postgres"))
    assert caught.seed is not None, caught.describe()
    assert set(caught.invariants) & set(mutation.breaks)
    assert caught.seed == hunt(mutation).seed
