"""A chain's transitions on Postgres, the append sent and answered later against the ordinary one.

``bench_postgres.py --only overlap`` (issue 28 §2, round 4). In this process, so
that the two are compared on the same server, connections warm, under the same load:
a run's writer takes ``targets`` targets through ``running`` and ``succeeded``, each
transition through :class:`~zuke._engine.observer.Observers` with the console
printing to ``/dev/null`` — what a CLI run does between its writes, without the
bodies and the scheduler. ``sent`` is the Postgres store as it is (a ``running``
transition's append sent on its own connection, the console's line printed while
the server works, the answer awaited before the transition returns); ``ordinary``
is the same store with every write made the way it was (a subclass that does not
say ``send_append_known`` itself). Blocks of the two alternate; each block is one
run's transitions (its creation and end not timed), measured by wall time and by
this thread's CPU time, per target.
"""

from __future__ import annotations

import asyncio
import os
import time

from zuke._clock import ManualClock
from zuke._engine.observer import Observers, Transition
from zuke._engine.writer import RunStateWriter
from zuke.cli.console import ConsoleReporter
from zuke.state.postgres import PostgresStateStore
from zuke.state.records import RunRecord, TargetRecord
from zuke.testing.store_contract import fresh

STAMP = "2026-01-01T00:00:00.000Z"


class OrdinaryStore(PostgresStateStore):
    """The Postgres store writing every append the ordinary way (no ``send_append_known`` of
    its own class: ``store_traits.sends_appends`` says no); the other traits said again."""

    inline_writes = True
    append_after_lazily = True


def _record(targets: int) -> RunRecord:
    return RunRecord(
        id=fresh(), build="B", root_target="t", status="running", actor="bench",
        created_at=STAMP, updated_at=STAMP,
        targets={f"t{i:04d}": TargetRecord() for i in range(targets)},
    )  # fmt: skip


async def _block(store: PostgresStateStore, targets: int) -> tuple[float, float]:
    """One run's transitions: (wall seconds, this thread's CPU seconds) per target."""
    clock = ManualClock()
    record = _record(targets)
    writer = RunStateWriter(store, record, version=None, clock=clock)
    writer.inline = lambda: True  # the run's only work, as a chain's target is
    await writer.create()
    with open(os.devnull, "w") as out:
        observers = Observers([ConsoleReporter(out=out, err=out)], writer=writer)
        wall, cpu = time.perf_counter(), time.thread_time()
        for name in record.targets:
            await observers.transition(Transition(name, "running", clock.now_ms()))
            await observers.transition(
                Transition(name, "succeeded", clock.now_ms(), duration_ms=0.0)
            )
        wall, cpu = time.perf_counter() - wall, time.thread_time() - cpu
    await writer.finish("succeeded")
    return wall / targets, cpu / targets


def transitions(url: str, targets: int, rounds: int) -> dict[str, list[tuple[float, float]]]:
    """``{"sent": [...], "ordinary": [...]}``: per block, wall and CPU seconds per target."""

    async def run() -> dict[str, list[tuple[float, float]]]:
        stores = {"sent": PostgresStateStore(url), "ordinary": OrdinaryStore(url)}
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in stores}
        try:
            for store in stores.values():  # warm-up: connections, PREPAREs, the sender
                await _block(store, targets)
            for i in range(rounds):
                order = list(stores.items())
                for name, store in order if i % 2 == 0 else order[::-1]:
                    found[name].append(await _block(store, targets))
        finally:
            for store in stores.values():
                store.close()
        return found

    return asyncio.run(run())


__all__ = ["OrdinaryStore", "transitions"]
