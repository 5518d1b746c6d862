"""Planted bugs: mutations of zuke's code the simulation must catch.

Each :class:`Mutation` replaces attributes of zuke's modules (monkeypatch-style, undone
afterwards) with a broken version (:mod:`tests.sim.broken`) — a check removed, a write
skipped, a rule reverted — and names the invariant(s) it should break. :func:`hunt` runs
seeds (from ``start``, ``step`` apart: a family is ``seed % 5``) until one breaks an
invariant, within a budget; ``test_mutations`` runs the whole catalogue and prints each
mutation with the seed that caught it (docs/simulation.md keeps the table). A mutation
that survives its budget fails the test: the simulation has gone blind to that bug.

``python -m tests.sim.mutations [NAME ...]`` runs the catalogue (or some of it) by hand.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.sim.broken import (
    any_signal,
    ended_elsewhere_goes_on,
    ended_runs_continue,
    ended_to_running,
    fence_stays,
    grant_anyway,
    hook_from_the_look,
    hook_not_under_lease,
    identity,
    keeps_held_rows,
    kept_lock_released,
    lazy_no_recheck,
    never_eligible,
    never_reaps,
    no_continuation,
    no_credit,
    none_async,
    noop,
    nothing,
    pg_release_any_token,
    prove_once,
    race_fails,
    redo_succeeded,
    release_any_token,
    signal_not_stored,
    silent_event,
    silent_timeout,
    skips_succeeded,
    stale_record_checks,
    stale_still_waiting,
    unknown_signal_crashes,
    witness_forgotten,
)
from tests.sim.invariants import INVARIANTS
from tests.sim.patches import patched
from tests.sim.scenario import FAMILIES, run_seed

#: (module, attribute, replacement) — the replacement made from the original
Patch = tuple[str, str, Callable[[Any], Any]]


@dataclass(frozen=True)
class Mutation:
    name: str
    #: what the broken code does, in a line
    what: str
    #: the invariants a seed that catches it breaks (any one of them)
    breaks: tuple[str, ...]
    patches: tuple[Patch, ...]
    #: the first seed tried, and the step between seeds (5: one family)
    start: int = 0
    step: int = 1
    #: at most this many seeds
    budget: int = 200
    #: hunt with the hot scenarios (more faults, more likely: make_scenario's ``hot``)
    hot: bool = False
    #: hunted by CI's test (False: too rare for its budget; ``python -m tests.sim.mutations``)
    ci: bool = True
    #: hunt with the race scenarios (a watcher, a slow continuation: make_scenario's ``race``)
    race: bool = False
    #: hunt with the fan-out scenarios (items waiting for their own signals: ``fanout``)
    fanout: bool = False
    #: only the invariants in ``breaks`` end a seed (the others are counted, and it goes
    #: on): a mutation that also trips a commoner check is caught where it is meant to be
    only: bool = False
    #: the store every seed of its hunt runs over (``postgres``: a bug in the Postgres
    #: store's SQL; hunted by tests/sim/test_pg.py, which has a database); None: the seed's
    store: str | None = None


@contextlib.contextmanager
def applied(mutation: Mutation) -> Iterator[None]:
    """``mutation``'s patches in place (with the simulation's own), undone afterwards."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for module_name, attr, make in mutation.patches:
            owner: Any = importlib.import_module(module_name)
            *path, leaf = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            original = getattr(owner, leaf)
            undo.append((owner, leaf, original))
            setattr(owner, leaf, make(original))
        yield
    finally:
        for owner, leaf, original in reversed(undo):
            setattr(owner, leaf, original)


@dataclass
class Caught:
    mutation: str
    #: the seed that caught it (``None``: it survived its budget)
    seed: int | None
    seeds: int
    seconds: float
    hot: bool = False
    invariants: tuple[str, ...] = ()
    detail: str = ""
    store: str | None = None

    def describe(self) -> str:
        if self.seed is None:
            return f"{self.mutation}: SURVIVED {self.seeds} seeds ({self.seconds:.1f} s)"
        seed = f"{self.seed} (hot)" if self.hot else str(self.seed)
        seed += f" ({self.store})" if self.store else ""
        return (f"{self.mutation}: caught by seed {seed} ({self.seeds} seeds, "
                f"{self.seconds:.1f} s): {', '.join(self.invariants)}")  # fmt: skip


def hunt(mutation: Mutation) -> Caught:
    """Seeds until one breaks an invariant the mutation names (another broken invariant is
    reported too: a mutation may show first where it was not expected)."""
    began = time.monotonic()
    seeds = range(mutation.start, mutation.start + mutation.step * mutation.budget, mutation.step)
    tried = 0
    with patched(), applied(mutation):
        for seed in seeds:
            tried += 1
            others = frozenset(INVARIANTS) - set(mutation.breaks) if mutation.only else frozenset()
            result = run_seed(seed, hot=mutation.hot, race=mutation.race, fanout=mutation.fanout,
                              ignore=others, store=mutation.store)  # fmt: skip
            if result.violations:
                names = tuple(sorted({v.invariant for v in result.violations}))
                return Caught(mutation.name, seed, tried, time.monotonic() - began,
                              mutation.hot, names, str(result.violations[0]),
                              mutation.store)  # fmt: skip
    return Caught(mutation.name, None, tried, time.monotonic() - began, mutation.hot,
                  store=mutation.store)  # fmt: skip


def family(name: str) -> int:
    """The first seed of a family (step 5 stays in it)."""
    return FAMILIES.index(name)


CATALOGUE: tuple[Mutation, ...] = (
    # the three of issue 25 §9
    Mutation("sweep-writes-stale-gate-rows", "a sweep takes the lease and writes back the "
             "gate rows its checks read, not re-checking them against the record",
             ("succeeded-final", "dispatch-once"),
             (("zuke.runs.sweep_run", "record_checks", stale_record_checks),
              ("zuke.runs.gate_checks", "_still_waiting", stale_still_waiting),
              ("zuke.runs.lifecycle", "LazyHold.get", lazy_no_recheck)),
             start=family("workflow"), step=5, hot=True),
    Mutation("continuation-removed", "neither the run's owner nor a deliverer continues a "
             "run that suspended with a signal stored", ("signal-consumed",),
             (("zuke.runs.continuation", "continue_due", no_continuation),
              ("zuke.runs.resume", "_continue_if_free", none_async)), start=0, step=5),
    Mutation("hold-proves-once", "Hold.write proves the lease before its first attempt only",
             ("dispatch-once", "succeeded-final", "hook-once", "compensation-iff"),
             (("zuke.runs.lifecycle", "Hold.write", prove_once),), start=family("workflow"),
             step=5, hot=True),
    # one per invariant
    Mutation("signal-not-stored", "a delivery says stored and stores nothing",
             ("signal-stored",), (("zuke.runs.resume", "store_signal", signal_not_stored),),
             start=0, step=5),
    Mutation("unknown-signal-stored", "a signal no gate waits for is not refused",
             ("signal-known",), (("zuke.runs.resume", "refuse_unknown", noop),), start=0,
             step=5),
    Mutation("signal-data-not-redacted", "a signal's data is stored unredacted",
             ("secret-never-stored",), (("zuke.runs.signals", "redact_data", identity),),
             start=0, step=5),
    Mutation("no-deadline-credit", "a resume does not push the deadline by the time parked",
             ("deadline-credit",),
             (("zuke.runs.continuation", "pushed_deadline", no_credit),),
             start=family("timeouts"), step=5),
    Mutation("intent-not-durable", "an effect runs before its intent is recorded",
             ("effect-once", "dispatch-once"),
             (("zuke._engine.writer", "RunStateWriter.persist_intent", none_async),)),
    Mutation("sweep-dispatch-not-durable", "a sweep's ctx.persist() writes nothing",
             ("dispatch-once",), (("zuke.runs.gate_checks", "_persist_meta", none_async),),
             start=family("workflow"), step=5),
    Mutation("no-compensations", "a cancelled run's walk compensates nothing",
             ("compensation-iff",),
             (("zuke._engine.compensation", "eligible", never_eligible),),
             start=family("cancel"), step=5),
    Mutation("lock-always-granted", "a lock is granted however it is held",
             ("lock-exclusive", "held-exclusive"),
             (("zuke.state.lock_rules", "acquire", grant_anyway),),
             start=family("locks"), step=5),
    Mutation("fence-stays", "every acquisition gets fence 1", ("fences-rise",),
             (("zuke.state.lock_rules", "acquire", fence_stays),), start=family("locks"),
             step=5),
    Mutation("cancel-marks-an-ended-run", "zuke cancel does not check that the run ended",
             ("terminal-once",), (("zuke.runs.cancel", "TERMINAL_STATUSES", nothing),),
             start=family("cancel"), step=5),
    Mutation("held-rows-kept", "a run gives back a kept lock but its record keeps the row",
             ("finished-holds-nothing",),
             (("zuke._engine.held", "RunHeldLocks.release", keeps_held_rows),),
             start=family("locks"), step=5),
    Mutation("no-reaping", "a sweep never reaps a run whose owner is gone", ("lease-live",),
             (("zuke.runs.sweep", "reap_run", never_reaps),)),
    Mutation("any-signal-passes", "a signal gate passes on any stored signal", ("gate-once",),
             (("zuke._waits", "_ExternalSignal.check", any_signal),), start=0, step=5),
    Mutation("silent-timeout", "a timed-out gate fails the run with no reason recorded",
             ("stated-reason",),
             (("zuke.runs.timeouts", "timed_out_error", silent_timeout),
              ("zuke.runs.timeouts", "RunEvent", silent_event)),
             start=family("timeouts"), step=5),
    Mutation("resume-redoes-succeeded", "a resumed run runs its succeeded targets again",
             ("body-once", "finished-not-resumed"),
             (("zuke._engine.resumed", "drive", redo_succeeded),)),
    Mutation("release-any-token", "a lock's release frees it whatever token asks: a stale "
             "holder's release frees whoever holds it now", ("claims-respected",),
             (("zuke.state.lock_rules", "release", release_any_token),),
             start=family("locks"), step=5, only=True),
    Mutation("hook-from-the-look", "a sweep calls a timed-out gate's hook as its look finds "
             "the gate expired, before it takes the run's lease", ("hook-once",),
             (("zuke.runs.sweep_run", "_settle_timeout", hook_from_the_look),
              ("zuke.runs.timeouts", "timeout_hook", hook_not_under_lease)),
             start=family("timeouts"), step=5, only=True),
    Mutation("kept-lock-released", "a held_until lock is given back at its target's end, not "
             "kept for the run", ("held-exclusive",),
             (("zuke._engine.target_locks", "TargetLock.release", kept_lock_released),),
             start=family("locks"), step=5, only=True),
    Mutation("ended-runs-continue", "a continuation does not refuse a run that ended (its "
             "look, its lease, its compare-and-swap)", ("finished-not-resumed", "terminal-once"),
             (("zuke.runs.continuation", "check_suspended", ended_runs_continue),
              ("zuke.runs.resume", "check_suspended", ended_runs_continue),
              ("zuke.runs.resume", "_refuse_ended", noop),
              ("zuke.runs.continuation", "_to_running", ended_to_running)),
             start=family("cancel"), step=5, race=True, only=True),
    Mutation("timeout-skips-succeeded", "a timed-out gate's settlement marks every other "
             "target skipped, the succeeded ones too", ("succeeded-final",),
             (("zuke.runs.timeouts", "settled_rows", skips_succeeded),),
             start=family("timeouts"), step=5, only=True),
    Mutation("unknown-signal-crashes", "an unknown signal is refused with a bare ValueError, "
             "not a zuke: line", ("no-engine-error",),
             (("zuke.runs.signals", "refuse_unknown", unknown_signal_crashes),
              ("zuke.runs.resume", "refuse_unknown", unknown_signal_crashes)),
             start=0, step=5, only=True),
    Mutation("continuation-race-fails", "a continuation that meets a run another process "
             "already ended fails its owner (bdd1d0e reverted)", ("exit-truthful",),
             (("zuke.runs.continuation", "continue_due", race_fails),), start=0, step=1,
             race=True, only=True),
    Mutation("witness-forgotten", "a write whose answer was lost, sent again, is not looked "
             "up by its witness: applied again", ("append-once",),
             (("zuke.state._unsure", "UnsureWrites.key", witness_forgotten),), only=True),
    Mutation("item-signal-crosses", "a fan-out item's gate passes on another item's signal",
             ("item-scope",), (("zuke._waits", "_ExternalSignal.check", any_signal),),
             fanout=True, only=True),
    Mutation("ended-elsewhere-goes-on", "an owner told by its write that another process "
             "ended the run drives its next target anyway (writing nothing)",
             ("finished-not-resumed",),
             (("zuke._engine.durable", "DurableRun._settled_elsewhere", ended_elsewhere_goes_on),),
             start=family("locks"), step=5, hot=True, only=True, budget=100),
    # the Postgres store's own lock SQL, over Postgres (tests/sim/test_pg.py hunts it)
    Mutation("pg-release-any-token", "the Postgres store's release frees a key whatever token "
             "asks: a stale holder's release frees whoever holds it now", ("claims-respected",),
             (("zuke.state._pg_locks", "release", pg_release_any_token),),
             start=family("locks"), step=5, only=True, store="postgres", budget=100),
)  # fmt: skip
BY_NAME = {m.name: m for m in CATALOGUE}


def main(argv: list[str]) -> int:
    chosen = [BY_NAME[name] for name in argv] if argv else list(CATALOGUE)
    if any(m.store == "postgres" for m in chosen):
        from tests.sim import pg

        pg.ensure_database()
    survived = 0
    for mutation in chosen:
        caught = hunt(mutation)
        print(caught.describe(), flush=True)
        if caught.detail:
            print(f"    {caught.detail[:300]}", flush=True)
        survived += caught.seed is None
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
