"""Whose run this is, and the one way to try for its lease: light enough for ``zuke cancel``.

A management command that needs no build (``zuke cancel`` of a live owner's
run) must not load the engine, so these rules live apart from
:mod:`zuke.runs.lifecycle`, which re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping

from zuke._clock import Clock, iso
from zuke._errors import ForeignRunError
from zuke.state._protocol import LockAcquired, LockHeld, LockHolder, StateStore, lease_key
from zuke.state.records import RunRecord


def ownership_problem(
    record: RunRecord, *, origin: str | None, build_name: str | None
) -> str | None:
    """Why ``record`` is not a run of this build (``None``: it is).

    A missing origin on either side does not decide; the class name does.
    """
    if origin and record.build_id and origin != record.build_id:
        return (
            f'run {record.id} belongs to build "{record.build_id}", not "{origin}"; '
            "set ZUKE_BUILD_ID to the same value everywhere this build runs"
        )
    if build_name and record.build != build_name:
        return f"run {record.id} is a run of {record.build}, not of {build_name}"
    return None


def check_ownership(record: RunRecord, *, origin: str | None, build_name: str | None) -> None:
    """Refuse a run of another build (:class:`~zuke.ForeignRunError`)."""
    problem = ownership_problem(record, origin=origin, build_name=build_name)
    if problem is not None:
        raise ForeignRunError(problem, run_id=record.id)


def run_lease_ttl_ms(env: Mapping[str, str], store: StateStore) -> int:
    """The run lease's TTL — one rule for the owner and every takeover (the store's own
    default included): :func:`zuke._engine.claims.lease_ttl_ms`."""
    from zuke._engine.claims import lease_ttl_ms

    return lease_ttl_ms(env, store)


def take_sync(
    store: StateStore,
    run_id: str,
    *,
    actor: str,
    clock: Clock,
    env: Mapping[str, str],
) -> LockAcquired | LockHeld:
    """One attempt at the run's lease from synchronous code, with the run lease's TTL."""
    holder = LockHolder(actor, run_id, iso(clock.now_ms()))
    return store.acquire_lock(lease_key(run_id), holder, run_lease_ttl_ms(env, store))


__all__ = ["check_ownership", "ownership_problem", "run_lease_ttl_ms", "take_sync"]
