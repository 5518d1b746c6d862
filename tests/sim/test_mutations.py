"""The planted-bug catalogue (tests.sim.mutations): every mutation caught within its
budget, each printed with the seed that caught it (``pytest -s`` shows the lines)."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from tests.sim.mutations import BY_NAME, CATALOGUE, Caught, applied, hunt
from tests.sim.patches import patched
from tests.sim.scenario import run_seed

pytestmark = pytest.mark.sim


def _hunt(name: str) -> Caught:
    return hunt(BY_NAME[name])


@pytest.mark.timeout(900)
def test_every_planted_bug_is_caught_with_its_seed() -> None:
    names = [m.name for m in CATALOGUE if m.ci and m.store is None]  # postgres: test_pg.py
    workers = min(2, os.cpu_count() or 1)
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        caught = pool.map(_hunt, names, chunksize=1)
    lines = [c.describe() for c in caught]
    print("\n" + "\n".join(lines))
    survived = [c.describe() for c in caught if c.seed is None]
    assert not survived, "\n".join(["planted bugs the simulation no longer catches:", *survived])


def test_a_mutation_is_undone_after_its_hunt() -> None:
    """The catalogue leaves zuke as it found it: the same seed passes again afterwards."""
    import zuke.runs.resume as resume

    before = vars(resume)["store_signal"]
    with patched(), applied(BY_NAME["signal-not-stored"]):
        assert vars(resume)["store_signal"] is not before
        assert run_seed(0).violations
    assert vars(resume)["store_signal"] is before
    assert run_seed(0).violations == []


def test_the_hot_scenarios_break_nothing_unmutated() -> None:
    """A seed a mutation is caught by is the mutation's doing: the hot scenarios pass as
    they are."""
    for seed in range(0, 60, 3):
        result = run_seed(seed, hot=True)
        assert result.violations == [], result.describe()


def test_the_race_scenarios_break_nothing_unmutated() -> None:
    """The race scenarios (a watcher, a slow continuation) pass as they are: before the fix
    of ``resume_run_async`` seeds 59, 64 and 69 broke ``exit-truthful`` (a deliverer whose
    signal was stored and consumed by the watcher said "not suspended")."""
    for seed in (59, 64, 69, *range(1, 40, 4)):
        result = run_seed(seed, race=True)
        assert result.violations == [], result.describe()


def test_finished_not_resumed_has_a_bug_only_it_catches() -> None:
    """``ended-elsewhere-goes-on``: an owner whose write was answered "the run ended" runs its
    next body anyway, writing nothing. ``finished-not-resumed`` catches it (seed 192, hot);
    with that invariant ignored, the same seed breaks nothing else — ``terminal-once`` sees
    no status leave its end — so the invariant is not ``terminal-once``'s in another form."""
    with patched(), applied(BY_NAME["ended-elsewhere-goes-on"]):
        caught = run_seed(192, hot=True)
        assert {v.invariant for v in caught.violations} == {"finished-not-resumed"}
        unseen = run_seed(192, hot=True, ignore=frozenset({"finished-not-resumed"}))
        assert unseen.violations == [], unseen.describe()
    assert run_seed(192, hot=True).violations == []
