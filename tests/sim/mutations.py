"""Planted bugs: mutations of zuke's code the simulation must catch.

Each :class:`Mutation` replaces attributes of zuke's modules (monkeypatch-style, undone
afterwards) with a broken version — a check removed, a write skipped, a rule reverted —
and names the invariant(s) it should break. :func:`hunt` runs seeds (from ``start``,
``step`` apart: a family is ``seed % 5``) until one breaks an invariant, within a
budget; ``test_mutations`` runs the whole catalogue and prints each mutation with the
seed that caught it (docs/simulation.md keeps the table). A mutation that survives its
budget fails the test: the simulation has gone blind to that bug.

``python -m tests.sim.mutations [NAME ...]`` runs the catalogue (or some of it) by hand.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

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

    def describe(self) -> str:
        if self.seed is None:
            return f"{self.mutation}: SURVIVED {self.seeds} seeds ({self.seconds:.1f} s)"
        seed = f"{self.seed} (hot)" if self.hot else str(self.seed)
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
            result = run_seed(seed, hot=mutation.hot)
            if result.violations:
                names = tuple(sorted({v.invariant for v in result.violations}))
                return Caught(mutation.name, seed, tried, time.monotonic() - began,
                              mutation.hot, names, str(result.violations[0]))  # fmt: skip
    return Caught(mutation.name, None, tried, time.monotonic() - began, mutation.hot)


def family(name: str) -> int:
    """The first seed of a family (step 5 stays in it)."""
    return FAMILIES.index(name)


# -- the broken versions ----------------------------------------------------------------------


def _none_async(original: Any) -> Any:
    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return nothing


def _noop(original: Any) -> Any:
    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return nothing


def _stale_record_checks(original: Any) -> Any:
    """``record_checks`` writing back the rows its checks read, not the fresh ones."""
    from zuke._clock import iso
    from zuke.state.records import RunDelta, RunRecord

    async def record_checks(lazy: Any, checks: list[Any], now: int) -> None:
        due = [c for c in checks if c.due and c.row.waiting_for is not None]
        if not due:
            return

        def change(fresh: RunRecord) -> RunDelta | None:
            rows = {}
            for check in due:  # no look at the fresh row: what the check read is written
                stamped = replace(check.row.waiting_for, checked_at=iso(now), detail=check.detail)
                rows[check.gate] = replace(check.row, meta=check.meta, waiting_for=stamped)
            return RunDelta(updated_at=fresh.updated_at, targets=rows)

        await (await lazy.get()).write(change)

    return record_checks


def _lazy_no_recheck(original: Any) -> Any:
    """``LazyHold.get`` taking the lease without checking the record against what the
    sweep's checks read (its ``basis``)."""
    from zuke.runs.lifecycle import take

    async def get(self: Any) -> Any:
        if self.hold is None:
            held = f"run {self.basis.id} is held by {{actor}}"
            self.hold = await take(self.store, self.basis.id, held=held, **self._take)
        return self.hold

    return get


def _stale_still_waiting(original: Any) -> Any:
    def still_waiting(fresh: Any, check: Any) -> Any:
        return check.row  # the row as the check read it, whatever the record says now

    return still_waiting


def _prove_once(original: Any) -> Any:
    """``Hold.write`` proving the lease before its first attempt only (the fix reverted)."""
    from zuke._engine.claims import stop_at_ms
    from zuke.state.update import GaveUp, Updated, update_run

    async def write(self: Any, change: Callable[[Any], Any]) -> Any:
        import asyncio

        from zuke.state._protocol import StoredRun

        await self.prove()
        stop_at = stop_at_ms(ttl_ms=self.ttl_ms, since_ms=self.since_ms)
        outcome = None
        for _ in range(10):

            def guarded(fresh: Any, stop_at: int = stop_at) -> Any:
                return change(fresh)  # no stop point either: the proof is the first one

            outcome = await asyncio.to_thread(update_run, self.store, self.run_id, guarded,
                                              attempts=1)  # fmt: skip
            if isinstance(outcome, Updated):
                self.found = StoredRun(outcome.record, outcome.version)
            if not isinstance(outcome, GaveUp):
                return outcome
        return outcome

    return write


def _no_continuation(original: Any) -> Any:
    async def continue_due(*args: Any, **kwargs: Any) -> None:
        return None  # the run that suspended with a signal stored is not continued

    return continue_due


def _signal_not_stored(original: Any) -> Any:
    from zuke.state.records import Signal

    async def store_signal(store: Any, record: Any, signal: Any, **kwargs: Any) -> Any:
        told = Signal(signal.data, record.updated_at, id="never-stored")
        return "stored", replace(record, signals={**record.signals, signal.name: told})

    return store_signal


def _identity(original: Any) -> Any:
    def same(data: Any, redactor: Any) -> Any:
        return data

    return same


def _no_credit(original: Any) -> Any:
    def pushed_deadline(record: Any, now_ms: int) -> Any:
        return record.deadline_at

    return pushed_deadline


def _nothing(original: Any) -> Any:
    return ()


def _never_eligible(original: Any) -> Any:
    def eligible(record: Any, name: str) -> bool:
        return False

    return eligible


def _grant_anyway(original: Any) -> Any:
    def acquire(current: Any, holder: Any, ttl_ms: int, *, now_ms: int, token: str,
                fence_floor: int = 0) -> Any:  # fmt: skip
        floor = max(current.fence if current else 0, fence_floor)  # fences still rise
        return original(None, holder, ttl_ms, now_ms=now_ms, token=token, fence_floor=floor)

    return acquire


def _fence_stays(original: Any) -> Any:
    from zuke.state.lock_rules import ClaimState, Granted

    def acquire(current: Any, holder: Any, ttl_ms: int, *, now_ms: int, token: str,
                fence_floor: int = 0) -> Any:  # fmt: skip
        found = original(current, holder, ttl_ms, now_ms=now_ms, token=token,
                         fence_floor=fence_floor)  # fmt: skip
        if not isinstance(found, Granted):
            return found
        claim = found.state
        return Granted(ClaimState(fence=1, holder=claim.holder, token=claim.token,
                                  expires_at=claim.expires_at))  # fmt: skip

    return acquire


def _keeps_held_rows(original: Any) -> Any:
    async def release(self: Any, keys: list[str] | None = None) -> None:
        writer, self.writer = self.writer, _NoHeld(self.writer)
        try:
            await original(self, keys)
        finally:
            self.writer = writer

    return release


class _NoHeld:
    """A writer that forgets to drop a held row (the record keeps the lock it gave back)."""

    def __init__(self, writer: Any) -> None:
        self._writer = writer

    def note_held(self, key: str, held: Any) -> None:
        if held is not None:
            self._writer.note_held(key, held)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)


def _never_reaps(original: Any) -> Any:
    from zuke.runs.reap import Reaped

    async def reap_run(build: Any, store: Any, run_id: str, **kwargs: Any) -> Any:
        return Reaped(run_id, "live", kwargs.get("status", "running"), "left alone")

    return reap_run


def _any_signal(original: Any) -> Any:
    from zuke._waits import NotYet, Satisfied

    def check(self: Any, ctx: Any) -> Any:
        signal = ctx.signals.get(self.name) or next(iter(ctx.signals.values()), None)
        return NotYet("waiting") if signal is None else Satisfied(signal)

    return check


def _silent_timeout(original: Any) -> Any:
    def timed_out_error(record: Any, gate: str) -> None:
        return None

    return timed_out_error


def _silent_event(original: Any) -> Any:
    def event(**kwargs: Any) -> Any:
        return original(**{**kwargs, "detail": None})

    return event


def _redo_succeeded(original: Any) -> Any:
    async def drive(plan: Any, **kwargs: Any) -> Any:
        return await original(plan, **{**kwargs, "done": {}})

    return drive


CATALOGUE: tuple[Mutation, ...] = (
    # the three of issue 25 §9
    Mutation("sweep-writes-stale-gate-rows", "a sweep takes the lease and writes back the "
             "gate rows its checks read, not re-checking them against the record",
             ("succeeded-final", "dispatch-once"),
             (("zuke.runs.sweep", "record_checks", _stale_record_checks),
              ("zuke.runs.gate_checks", "_still_waiting", _stale_still_waiting),
              ("zuke.runs.lifecycle", "LazyHold.get", _lazy_no_recheck)),
             start=family("workflow"), step=5, hot=True),
    Mutation("continuation-removed", "neither the run's owner nor a deliverer continues a "
             "run that suspended with a signal stored", ("signal-consumed",),
             (("zuke.runs.continuation", "continue_due", _no_continuation),
              ("zuke.runs.resume", "_continue_if_free", _none_async)), start=0, step=5),
    Mutation("hold-proves-once", "Hold.write proves the lease before its first attempt only",
             ("dispatch-once", "succeeded-final", "hook-once", "compensation-iff"),
             (("zuke.runs.lifecycle", "Hold.write", _prove_once),), start=family("workflow"),
             step=5, hot=True),
    # one per invariant
    Mutation("signal-not-stored", "a delivery says stored and stores nothing",
             ("signal-stored",), (("zuke.runs.resume", "store_signal", _signal_not_stored),),
             start=0, step=5),
    Mutation("unknown-signal-stored", "a signal no gate waits for is not refused",
             ("signal-known",), (("zuke.runs.resume", "refuse_unknown", _noop),), start=0,
             step=5),
    Mutation("signal-data-not-redacted", "a signal's data is stored unredacted",
             ("secret-never-stored",), (("zuke.runs.signals", "redact_data", _identity),),
             start=0, step=5),
    Mutation("no-deadline-credit", "a resume does not push the deadline by the time parked",
             ("deadline-credit",),
             (("zuke.runs.continuation", "pushed_deadline", _no_credit),),
             start=family("timeouts"), step=5),
    Mutation("intent-not-durable", "an effect runs before its intent is recorded",
             ("effect-once", "dispatch-once"),
             (("zuke._engine.writer", "RunStateWriter.persist_intent", _none_async),)),
    Mutation("sweep-dispatch-not-durable", "a sweep's ctx.persist() writes nothing",
             ("dispatch-once",), (("zuke.runs.gate_checks", "_persist_meta", _none_async),),
             start=family("workflow"), step=5),
    Mutation("no-compensations", "a cancelled run's walk compensates nothing",
             ("compensation-iff",),
             (("zuke._engine.compensation", "eligible", _never_eligible),),
             start=family("cancel"), step=5),
    Mutation("lock-always-granted", "a lock is granted however it is held",
             ("lock-exclusive", "held-exclusive"),
             (("zuke.state.lock_rules", "acquire", _grant_anyway),),
             start=family("locks"), step=5),
    Mutation("fence-stays", "every acquisition gets fence 1", ("fences-rise",),
             (("zuke.state.lock_rules", "acquire", _fence_stays),), start=family("locks"),
             step=5),
    Mutation("cancel-marks-an-ended-run", "zuke cancel does not check that the run ended",
             ("terminal-once",), (("zuke.runs.cancel", "TERMINAL_STATUSES", _nothing),),
             start=family("cancel"), step=5),
    Mutation("held-rows-kept", "a run gives back a kept lock but its record keeps the row",
             ("finished-holds-nothing",),
             (("zuke._engine.held", "RunHeldLocks.release", _keeps_held_rows),),
             start=family("locks"), step=5),
    Mutation("no-reaping", "a sweep never reaps a run whose owner is gone", ("lease-live",),
             (("zuke.runs.sweep", "reap_run", _never_reaps),)),
    Mutation("any-signal-passes", "a signal gate passes on any stored signal", ("gate-once",),
             (("zuke._waits", "_ExternalSignal.check", _any_signal),), start=0, step=5),
    Mutation("silent-timeout", "a timed-out gate fails the run with no reason recorded",
             ("stated-reason",),
             (("zuke.runs.timeouts", "timed_out_error", _silent_timeout),
              ("zuke.runs.timeouts", "RunEvent", _silent_event)),
             start=family("timeouts"), step=5),
    Mutation("resume-redoes-succeeded", "a resumed run runs its succeeded targets again",
             ("body-once", "finished-not-resumed"),
             (("zuke._engine.resumed", "drive", _redo_succeeded),)),
)  # fmt: skip
BY_NAME = {m.name: m for m in CATALOGUE}


def main(argv: list[str]) -> int:
    chosen = [BY_NAME[name] for name in argv] if argv else list(CATALOGUE)
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
