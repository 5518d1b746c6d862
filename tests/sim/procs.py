"""What the simulation's runtime (:mod:`tests.sim.runtime`) keeps of a simulated process:
the actor and its fault state, its tracked threads, and where each is parked.

Apart from the runtime's :class:`~tests.sim.runtime.Sim` — the parking and waking, the
clock, the scheduler's side — so that the modules that only name an actor or a thread
(the invariants, the loops) need not know how they are scheduled.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.sim.loops import SimLoop


class Crash(BaseException):
    """Raised in an actor's threads when its process is gone: nothing of it runs after."""


class HarnessStuck(AssertionError):
    """A tracked thread ran for longer than :data:`QUIET_TIMEOUT_S` without parking."""


@dataclass(eq=False)
class Actor:
    """One simulated process and its fault state (all sim times in epoch ms)."""

    name: str
    seed: int = 0
    #: crashed (kill -9): frozen for ever, its threads killed at teardown
    dead: bool = False
    #: stalled (SIGSTOP, a GC pause): nothing of it runs until this time
    frozen_until: float = 0
    #: cut off from the store: its granted calls raise StoreUnavailableError until then
    cut_until: float = 0
    #: its main thread returned: whatever of it is left is killed (the process exited)
    gone: bool = False
    faulted: bool = False
    #: when it was first faulted, in the ledger's order (tests.sim.invariants): work it had
    #: finished before that is not excused by the fault
    fault_order: int | None = None
    #: what it passed to ``os._exit`` (the engine ended its process)
    exit_code: int | None = None
    result: Any = None
    error: BaseException | None = None
    #: exceptions raised on its other threads (an engine or harness bug, reported)
    errors: list[BaseException] = field(default_factory=list)
    threads: list[SimThread] = field(default_factory=list)
    main: SimThread | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(f"{self.seed}:{self.name}")

    def frozen(self, now: int) -> bool:
        return self.dead or now < self.frozen_until

    @property
    def finished(self) -> bool:
        return self.main is not None and not self.main.alive


class _Gate:
    """Opened once: a lock held from the start (no Condition, which the sim patches)."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lock.acquire()

    def set(self) -> None:
        self._lock.release()

    def wait(self) -> None:
        self._lock.acquire()


@dataclass(eq=False)
class Park:
    """Where a tracked thread waits, and how it was woken (``outcome``)."""

    kind: str  #: call, sleep, loop, idle, join
    due: int | None = None
    label: str = ""
    stop: Callable[[], bool] | None = None
    loop: SimLoop | None = None
    joining: SimThread | None = None
    event: _Gate = field(default_factory=_Gate)
    outcome: str = ""  #: go, due, stop, die


@dataclass(eq=False)
class SimThread:
    actor: Actor
    name: str
    origin: str = ""
    park: Park | None = None
    alive: bool = True
    #: work handed to an idle SimExecutor worker
    item: Any = None
    #: the OS thread's ident (its stack, for a directed fault: tests.sim.world)
    ident: int | None = None
    #: set with a grant: the call lands, then its caller gets this error (a lost answer)
    lose: Callable[[], BaseException] | None = None


current_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "zuke_sim_actor", default=None
)


def stable_name(name: str) -> str:
    """A thread's name without the counters Python adds (``Thread-12``, ``pool_3``)."""
    return "".join(c for c in name if not c.isdigit())


def task_origin() -> str | None:
    """The coroutine of the task making a call from its loop's thread, if any."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    if task is None:
        return None
    return getattr(task.get_coro(), "__qualname__", "task")
