"""The broken versions the planted-bug catalogue (:mod:`tests.sim.mutations`) patches in.

Each function takes the original attribute and returns its replacement: a check
removed, a write skipped, a rule reverted. Kept apart from the catalogue so that
what each mutation breaks reads in one place and how in another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any


def none_async(original: Any) -> Any:
    async def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return nothing


def noop(original: Any) -> Any:
    def nothing(*args: Any, **kwargs: Any) -> None:
        return None

    return nothing


def stale_record_checks(original: Any) -> Any:
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


def lazy_no_recheck(original: Any) -> Any:
    """``LazyHold.get`` taking the lease without checking the record against what the
    sweep's checks read (its ``basis``)."""
    from zuke.runs.lifecycle import take

    async def get(self: Any) -> Any:
        if self.hold is None:
            held = f"run {self.basis.id} is held by {{actor}}"
            self.hold = await take(self.store, self.basis.id, held=held, **self._take)
        return self.hold

    return get


def stale_still_waiting(original: Any) -> Any:
    def still_waiting(fresh: Any, check: Any) -> Any:
        return check.row  # the row as the check read it, whatever the record says now

    return still_waiting


def prove_once(original: Any) -> Any:
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


def no_continuation(original: Any) -> Any:
    async def continue_due(*args: Any, **kwargs: Any) -> None:
        return None  # the run that suspended with a signal stored is not continued

    return continue_due


def signal_not_stored(original: Any) -> Any:
    from zuke.state.records import Signal

    async def store_signal(store: Any, record: Any, signal: Any, **kwargs: Any) -> Any:
        told = Signal(signal.data, record.updated_at, id="never-stored")
        return "stored", replace(record, signals={**record.signals, signal.name: told})

    return store_signal


def identity(original: Any) -> Any:
    def same(data: Any, redactor: Any) -> Any:
        return data

    return same


def no_credit(original: Any) -> Any:
    def pushed_deadline(record: Any, now_ms: int) -> Any:
        return record.deadline_at

    return pushed_deadline


def nothing(original: Any) -> Any:
    return ()


def never_eligible(original: Any) -> Any:
    def eligible(record: Any, name: str) -> bool:
        return False

    return eligible


def grant_anyway(original: Any) -> Any:
    def acquire(current: Any, holder: Any, ttl_ms: int, *, now_ms: int, token: str,
                fence_floor: int = 0) -> Any:  # fmt: skip
        floor = max(current.fence if current else 0, fence_floor)  # fences still rise
        return original(None, holder, ttl_ms, now_ms=now_ms, token=token, fence_floor=floor)

    return acquire


def fence_stays(original: Any) -> Any:
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


def keeps_held_rows(original: Any) -> Any:
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


def never_reaps(original: Any) -> Any:
    from zuke.runs.reap import Reaped

    async def reap_run(build: Any, store: Any, run_id: str, **kwargs: Any) -> Any:
        return Reaped(run_id, "live", kwargs.get("status", "running"), "left alone")

    return reap_run


def any_signal(original: Any) -> Any:
    from zuke._waits import NotYet, Satisfied

    def check(self: Any, ctx: Any) -> Any:
        signal = ctx.signals.get(self.name) or next(iter(ctx.signals.values()), None)
        return NotYet("waiting") if signal is None else Satisfied(signal)

    return check


def silent_timeout(original: Any) -> Any:
    def timed_out_error(record: Any, gate: str) -> None:
        return None

    return timed_out_error


def silent_event(original: Any) -> Any:
    def event(**kwargs: Any) -> Any:
        return original(**{**kwargs, "detail": None})

    return event


def redo_succeeded(original: Any) -> Any:
    async def drive(plan: Any, **kwargs: Any) -> Any:
        return await original(plan, **{**kwargs, "done": {}})

    return drive


def release_any_token(original: Any) -> Any:
    """``lock_rules.release`` freeing the key whatever token asks (a stale holder's release
    frees whoever holds it now)."""
    from zuke.state.lock_rules import break_claim

    def release(current: Any, token: str) -> Any:
        return break_claim(current)

    return release


def ended_elsewhere_goes_on(original: Any) -> Any:
    """``DurableRun._settled_elsewhere`` ignoring a run another process *ended*: the owner
    whose write was answered "the run ended" (``Unchanged``) keeps driving its plan. Its
    writer has disowned the run, so nothing it does reaches the record (no status leaves
    its end: ``terminal-once`` sees nothing) — but its next body runs."""
    from zuke.state.records import TERMINAL_STATUSES

    def settled(self: Any, status: str) -> Any:
        if status in TERMINAL_STATUSES:
            return None
        return original(self, status)

    return settled


def pg_release_any_token(original: Any) -> Any:
    """``_pg_locks.release`` without its token in ``WHERE``: the Postgres twin of
    :func:`release_any_token`, in the store's own SQL."""
    from zuke.state._pg_locks import _RELEASED

    def release(conn: Any, ns: str, key: str, token: str) -> bool:
        cursor = conn.execute(
            f"UPDATE zuke_locks SET {_RELEASED} WHERE ns = %s AND key = %s", (ns, key)
        )
        return bool(cursor.rowcount > 0)

    return release


def hook_from_the_look(original: Any) -> Any:
    """The sweep's ``_settle_timeout`` calling the gate's hook as its look finds the gate
    expired — before it takes the run's lease — instead of under the lease."""
    from zuke.runs.gate_checks import timeout_hook

    async def settle(loaded: Any, lazy: Any, check: Any, run: Any, actor: str) -> Any:
        await timeout_hook(loaded, lazy.basis, check.gate, run.clock.now_ms(), actor=actor)
        return await original(loaded, lazy, check, run, actor)

    return settle


def hook_not_under_lease(original: Any) -> Any:
    """The hook under the lease, gone (:func:`hook_from_the_look` calls it instead)."""

    async def timeout_hook(*args: Any, **kwargs: Any) -> None:
        return None

    return timeout_hook


def kept_lock_released(original: Any) -> Any:
    """``TargetLock.release`` giving a ``held_until`` lock back at its body's end, as if it
    were the target's alone (the run still counts on it until its ``promote``)."""

    async def release(self: Any) -> None:
        await self.claim.release()
        self._reopen()

    return release


def ended_runs_continue(original: Any) -> Any:
    """``check_suspended`` refusing only a run that is running or being cancelled: a run
    that ended is continued like a suspended one."""

    def check(record: Any) -> None:
        if record.status in ("running", "cancelling"):
            original(record)

    return check


def ended_to_running(original: Any) -> Any:
    """``_to_running``'s compare-and-swap taking a run that ended as if it were suspended."""
    from zuke.state.records import TERMINAL_STATUSES

    def to_running(*args: Any, **kwargs: Any) -> Any:
        change = original(*args, **kwargs)

        def lenient(fresh: Any) -> Any:
            if fresh.status in TERMINAL_STATUSES:
                fresh = replace(fresh, status="suspended")
            return change(fresh)

        return lenient

    return to_running


def skips_succeeded(original: Any) -> Any:
    """``settled_rows`` skipping every other target, the succeeded ones too."""

    def rows(record: Any, gate: str, now: str, error: str, *, keep: Any = frozenset()) -> Any:
        found = original(record, gate, now, error, keep=keep)
        for name, other in record.targets.items():
            if name != gate and name not in keep and other.status == "succeeded":
                found[name] = replace(other, status="skipped", ended_at=now, error=None)
        return found

    return rows


def unknown_signal_crashes(original: Any) -> Any:
    """``refuse_unknown`` refusing an unknown signal with a bare ``ValueError`` (a traceback,
    not one ``zuke:`` line)."""

    def refuse(record: Any, name: str, wanted: Any) -> None:
        if wanted is not None and name not in wanted:
            raise ValueError(f"no gate waits for {name!r}")

    return refuse


def race_fails(original: Any) -> Any:
    """``continue_due`` before ``bdd1d0e``: a continuation that meets a run another process
    already ended raises ``RunNotSuspendedError`` (the owner's command fails) instead of
    finding nothing to do."""
    from zuke._errors import AlreadyResumedError
    from zuke.runs.continuation import ResumeOptions, continue_run, is_due

    async def continue_due(build_cls: Any, store: Any, run_id: str, run: Any, *,
                           actor: str) -> Any:  # fmt: skip
        if not await is_due(store, run_id):
            return None
        try:
            return await continue_run(build_cls, store, run_id, ResumeOptions(), run, actor=actor)
        except AlreadyResumedError:
            return None

    return continue_due


def witness_forgotten(original: Any) -> Any:
    """``UnsureWrites.key`` finding nothing: a write whose answer was lost, sent again, is
    not looked up by its witness — it is applied again."""

    def key(self: Any, target: str, expected: str, payload: object) -> None:
        return None

    return key
