"""The simulation's runtime: every thread, event loop, timer and store call an actor makes
is held until the scheduler lets it go, so one seed is one interleaving.

An *actor* is a process (an owner, a resumer, a sweeper, ...). It runs on a thread
of its own; every thread it starts (asyncio's workers, the body pool, heartbeats,
the compensation walk's thread) is *tracked*: it counts as running until it parks
at one of four places, and only there:

* a **store call** (:meth:`Sim.call`): held until the scheduler grants it;
* a **timer**: an event loop with nothing ready (its ``select``), or a heartbeat's
  wait (:meth:`Sim.sleep`) — both on the simulated clock, which moves only when
  the scheduler advances it;
* an **idle worker** of :class:`SimExecutor`, or a thread **joining** another.

When no tracked thread runs (*quiescence*), the scheduler picks the next move
(:mod:`tests.sim.scheduler`). Between two moves only the threads of the actor
that was let go run, so what they do is decided by the moves alone.

Actor identity travels in a :class:`contextvars.ContextVar` (``asyncio.to_thread``
copies it; :func:`installed` makes ``threading.Thread.start`` copy it too).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import gc
import itertools
import logging
import math
import os
import random
import selectors
import sys
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from zuke._clock import ManualClock, SystemClock
from zuke._errors import StoreUnavailableError

#: real seconds the scheduler waits for quiescence before it calls the harness stuck
QUIET_TIMEOUT_S = 20.0


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


current_actor: contextvars.ContextVar[Actor | None] = contextvars.ContextVar(
    "zuke_sim_actor", default=None
)
ACTIVE: Sim | None = None


class Sim:
    """Tracked threads, parks and the simulated clock, under one condition."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.epoch = clock.now_ms()
        self.cv = threading.Condition(threading.Lock())
        self.running = 0
        self.threads: list[SimThread] = []
        self._local = threading.local()
        self.spurious = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """The condition, marked held on this thread: a finalizer that the garbage collector
        runs inside (an abandoned coroutine's ``finally``) must not park here (see
        :meth:`reentered`)."""
        with self.cv:
            self._local.held = True
            try:
                yield
            finally:
                self._local.held = False

    def reentered(self) -> None:
        """Refuse a park from inside a held section, or from an untracked thread running
        a killed actor's finalizer: that code belongs to a process that is gone."""
        if getattr(self._local, "held", False):
            raise Crash

    # -- threads ------------------------------------------------------------------------

    def me(self) -> SimThread | None:
        found: SimThread | None = getattr(self._local, "me", None)
        return found

    def track(self, thread: threading.Thread, actor: Actor, *, main: bool = False) -> SimThread:
        """Make ``thread`` (not started yet) one of ``actor``'s: it runs in a copy of the
        caller's context with the actor set, and counts as running from now on."""
        st = SimThread(actor, thread.name, origin=f"thread:{_stable(thread.name)}")
        context = contextvars.copy_context()
        context.run(current_actor.set, actor)
        body = thread.run

        def run() -> None:
            self._local.me = st
            try:
                context.run(body)
            except Crash:
                pass
            except BaseException as exc:
                if main:
                    actor.error = exc
                else:
                    actor.errors.append(exc)
            finally:
                self._ended(st)

        thread.run = run  # type: ignore[method-assign]
        thread._zuke_sim = st  # type: ignore[attr-defined]
        with self.held():
            self.running += 1
            self.threads.append(st)
            actor.threads.append(st)
            if main:
                actor.main = st
        return st

    def spawn(self, actor: Actor, fn: Callable[[], Any]) -> None:
        """Start ``actor``'s process: ``fn`` on its main thread (its value is the result)."""

        def main() -> None:
            actor.result = fn()

        thread = threading.Thread(target=main, name=f"sim-{actor.name}", daemon=True)
        self.track(thread, actor, main=True)
        _REAL_START(thread)

    def _ended(self, st: SimThread) -> None:
        with self.held():
            st.alive = False
            self.threads.remove(st)
            if st.park is None:
                self.running -= 1
            for other in self.threads:
                if other.park is not None and other.park.joining is st:
                    self._unpark(other, "go")
            if st is st.actor.main:
                st.actor.gone = True  # the process exits: its other threads die with it
                for other in st.actor.threads:
                    if other.alive and other.park is not None:
                        self._unpark(other, "die")
            if self.running == 0:
                self.cv.notify_all()

    # -- parking ------------------------------------------------------------------------

    def _park(self, st: SimThread, park: Park, pool: SimExecutor | None = None) -> str:
        """Park ``st`` until woken; ``pool``: the executor it waits in as an idle worker,
        joined in the same held section (a submit must never find a worker listed idle
        that has not parked yet)."""
        self.reentered()
        with self.held():
            if st.actor.gone:
                return "die"
            if pool is not None:
                if pool.closed:
                    return "closed"
                pool.idle.append(st)
            st.park = park
            self.running -= 1
            if self.running == 0:
                self.cv.notify_all()
        park.event.wait()
        return park.outcome

    def _unpark(self, st: SimThread, outcome: str, *, write: bool = True) -> None:
        """Wake ``st`` (the condition is held)."""
        park = st.park
        assert park is not None
        st.park = None
        park.outcome = outcome
        self.running += 1
        if park.kind == "loop":
            assert park.loop is not None
            if write:
                park.loop._write_to_self()  # type: ignore[attr-defined]
        else:
            park.event.set()

    def due_after(self, seconds: float) -> int:
        now = self.clock.now_ms()
        return now + max(1, math.ceil(seconds * 1000 - 1e-6))

    def call(self, label: str, fn: Callable[[], Any]) -> Any:
        """A store call: held until granted, then run (or refused: the actor is cut off)."""
        st = self.me()
        if st is None:
            raise Crash  # a killed actor's finalizer, run by the garbage collector
        self.reentered()
        origin = _task_origin() or st.origin
        park = Park("call", label=f"{st.actor.name}|{origin}|{label}")
        if self._park(st, park) == "die":
            raise Crash
        if self.clock.now_ms() < st.actor.cut_until:
            raise StoreUnavailableError(f"state: {st.actor.name} is cut off from the store (sim)")
        return fn()

    def sleep(self, seconds: float, stop: Callable[[], bool] | None = None) -> bool:
        """Wait ``seconds`` of simulated time; True if woken early because ``stop()``."""
        st = self.me()
        if st is None:
            raise RuntimeError("Sim.sleep outside an actor")
        if stop is not None and stop():
            return True
        outcome = self._park(st, Park("sleep", due=self.due_after(seconds), stop=stop))
        if outcome == "die":
            raise Crash
        return outcome == "stop"

    def wait_event(self, event: threading.Event, timeout: float | None) -> bool | None:
        """``event.wait(timeout)`` in a tracked thread: parked, the timeout on the simulated
        clock, woken at a quiescent point once the event is set. ``None``: not tracked."""
        st = self.me()
        if st is None:
            return None
        if event.is_set():
            return True
        due = None if timeout is None else self.due_after(timeout)
        if self._park(st, Park("sleep", due=due, stop=event.is_set)) == "die":
            raise Crash
        return event.is_set()

    def wait_until(self, done: Callable[[], bool], timeout: float | None) -> bool:
        """Park a tracked thread until ``done()`` (checked at quiescent points) or the
        simulated timeout; whether ``done()`` holds."""
        st = self.me()
        assert st is not None
        due = None if timeout is None else self.due_after(timeout)
        if self._park(st, Park("sleep", due=due, stop=done)) == "die":
            raise Crash
        return done()

    def join(self, thread: threading.Thread, timeout: float | None) -> bool:
        """Park a tracked thread joining a tracked one; False if it does not apply."""
        me, other = self.me(), getattr(thread, "_zuke_sim", None)
        if me is None or other is None or timeout is not None:
            return False
        with self.held():
            if not other.alive:
                return False
        # A race with the joined thread's end is harmless: _ended wakes joiners it finds,
        # and one that parks after it ended is woken here.
        park = Park("join", joining=other)
        with self.held():
            if not other.alive or me.actor.gone:
                return False
            me.park = park
            self.running -= 1
            if self.running == 0:
                self.cv.notify_all()
        park.event.wait()
        if park.outcome == "die":
            raise Crash
        return False

    # -- the scheduler's side -----------------------------------------------------------

    def wait_quiet(self) -> None:
        deadline = time.monotonic() + QUIET_TIMEOUT_S
        with self.held():
            while self.running > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HarnessStuck(self.describe_running())
                self.cv.wait(left)

    def describe_running(self) -> str:
        frames = sys._current_frames()
        lines = [f"{self.running} tracked thread(s) never parked:"]
        for thread in threading.enumerate():
            st = getattr(thread, "_zuke_sim", None)
            if st is not None and st.alive and st.park is None and thread.ident in frames:
                stack = "".join(traceback.format_stack(frames[thread.ident])[-6:])
                lines.append(f"-- {st.actor.name} {st.name}\n{stack}")
        return "\n".join(lines)

    def parked(self) -> list[SimThread]:
        return [st for st in self.threads if st.park is not None]

    def wake_stopped(self) -> bool:
        """Wake sleepers whose stop condition holds (a released claim's heartbeat)."""
        woke = False
        now = self.clock.now_ms()
        with self.held():
            for st in self.parked():
                park = st.park
                assert park is not None
                sleeping = park.kind == "sleep" and park.stop is not None
                if sleeping and not st.actor.frozen(now) and park.stop is not None and park.stop():
                    self._unpark(st, "stop")
                    woke = True
        return woke

    def grant(self, st: SimThread) -> None:
        with self.held():
            self._unpark(st, "go")

    def advance_to(self, when: int) -> None:
        """Move the clock to ``when``; what falls due is woken by later moves, one at a time."""
        now = self.clock.now_ms()
        if when > now:
            self.clock.advance(when - now)

    def wake(self, st: SimThread) -> None:
        """Wake a timer that is due (a loop's ``call_later``, a sleep)."""
        with self.held():
            self._unpark(st, "due")

    def kill(self, actors: list[Actor]) -> None:
        """End ``actors``' processes: every parked thread of theirs raises :class:`Crash`."""
        with self.held():
            for actor in actors:
                actor.gone = True
            for st in self.parked():
                if st.actor in actors:
                    self._unpark(st, "die")

    def close(self, actors: list[Actor]) -> None:
        """End the seed: kill what still runs, wait for every thread, and collect what the
        killed actors left (their coroutines' ``finally`` blocks run now, here, where any
        store call they make raises :class:`Crash`) — never later, inside another seed."""
        killed = [a for a in actors if not a.finished]
        self.kill(actors)
        self.wait_all_ended()
        if killed:
            hook = sys.unraisablehook
            sys.unraisablehook = lambda unraisable: None
            try:
                gc.collect()
            finally:
                sys.unraisablehook = hook

    def wait_all_ended(self) -> None:
        deadline = time.monotonic() + QUIET_TIMEOUT_S
        with self.held():
            while self.threads:
                for st in self.parked():
                    if st.actor.gone:
                        self._unpark(st, "die")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise HarnessStuck(self.describe_running())
                self.cv.wait(min(left, 0.05))


def _stable(name: str) -> str:
    """A thread's name without the counters Python adds (``Thread-12``, ``pool_3``)."""
    return "".join(c for c in name if not c.isdigit())


def _task_origin() -> str | None:
    """The coroutine of the task making a call from its loop's thread, if any."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return None
    if task is None:
        return None
    return getattr(task.get_coro(), "__qualname__", "task")


# -- event loops ----------------------------------------------------------------------------


class _SimSelector:
    """The loop's selector: a select that would wait parks the loop's thread instead."""

    def __init__(self, sim: Sim) -> None:
        self.sim = sim
        self.inner = selectors.DefaultSelector()
        self.loop: SimLoop | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def select(self, timeout: float | None = None) -> list[Any]:
        sim, loop = self.sim, self.loop
        st = sim.me()
        if (timeout is not None and timeout <= 0) or st is None or loop is None:
            return self.inner.select(timeout)
        loop._sim_thread = st
        with sim.held():
            if st.actor.gone:
                raise Crash
            if loop._sim_wakeup:
                loop._sim_wakeup = False
                park = None
            else:
                due = None if timeout is None else sim.due_after(timeout)
                park = Park("loop", due=due, loop=loop)
                st.park = park
                sim.running -= 1
                if sim.running == 0:
                    sim.cv.notify_all()
        if park is None:
            return self.inner.select(0)
        events = self.inner.select(None)
        with sim.held():
            if st.park is park:  # woken by nobody we know of: count it running again
                sim.spurious += 1
                st.park = None
                sim.running += 1
        if park.outcome == "die":
            raise Crash
        return events


class SimLoop(asyncio.SelectorEventLoop):
    """An event loop on the simulated clock whose default executor is a SimExecutor."""

    def __init__(self, sim: Sim) -> None:
        selector = _SimSelector(sim)
        self._sim = sim
        self._sim_wakeup = False
        self._sim_thread: SimThread | None = None
        super().__init__(selector)  # type: ignore[arg-type]
        selector.loop = self
        self._clock_resolution = 1e-6
        self._default_executor = SimExecutor()

    def time(self) -> float:
        return (self._sim.clock.now_ms() - self._sim.epoch) / 1000

    def call_soon_threadsafe(  # type: ignore[override]
        self, callback: Any, *args: Any, context: Any = None
    ) -> Any:
        sim = self._sim
        sim.reentered()
        with sim.held():
            st = self._sim_thread
            park = st.park if st is not None else None
            if st is not None and park is not None and park.kind == "loop" and park.loop is self:
                sim._unpark(st, "go", write=False)  # the write below wakes it
            else:
                self._sim_wakeup = True
        return super().call_soon_threadsafe(callback, *args, context=context)

    async def shutdown_default_executor(self) -> None:
        executor = self._default_executor
        if isinstance(executor, SimExecutor):
            executor.shutdown(wait=False)


class SimPolicy(asyncio.DefaultEventLoopPolicy):
    """New loops made inside an actor are SimLoops (``asyncio.run`` asks the policy)."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        if ACTIVE is not None and current_actor.get() is not None:
            return SimLoop(ACTIVE)
        return super().new_event_loop()


# -- executors ------------------------------------------------------------------------------


class SimExecutor(concurrent.futures.Executor):
    """A thread pool whose idle workers park, so an idle pool never blocks quiescence."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        assert ACTIVE is not None
        self.sim = ACTIVE
        self.prefix = thread_name_prefix or "sim-worker"
        self.idle: list[SimThread] = []
        self.closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        # Running from now on, as if a worker took it at once: a cancel that races the
        # worker's start would otherwise decide by thread timing whether the call happens.
        future.set_running_or_notify_cancel()
        item = (future, fn, args, kwargs, _task_origin() or "submit")
        sim = self.sim
        with sim.held():
            if self.idle:
                worker = self.idle.pop()
                worker.item = item
                sim._unpark(worker, "go")
                return future
        thread = threading.Thread(target=self._work, args=(item,), name=self.prefix, daemon=True)
        thread.start()  # tracked: submit runs in an actor's context
        return future

    def _work(self, item: Any) -> None:
        sim = self.sim
        st = sim.me()
        assert st is not None
        while item is not None:
            future, fn, args, kwargs, origin = item
            st.origin = origin
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)
                if isinstance(exc, Crash):
                    raise
            if sim._park(st, Park("idle"), pool=self) in ("die", "closed"):
                return
            item, st.item = st.item, None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        sim = self.sim
        with sim.held():
            self.closed = True
            for worker in self.idle:
                if worker.park is not None:
                    sim._unpark(worker, "go")  # no item: it returns
            self.idle.clear()


class _PerActor:
    """A process-wide object of zuke (the bodies a claim guards), one per simulated
    process: actors share a Python process, not their processes' state."""

    def __init__(self, original: Any) -> None:
        self._original = original
        self._mine: weakref.WeakKeyDictionary[Actor, Any] = weakref.WeakKeyDictionary()

    def __getattr__(self, name: str) -> Any:
        actor = current_actor.get()
        if actor is None:
            return getattr(self._original, name)
        mine = self._mine.get(actor)
        if mine is None:
            mine = self._mine[actor] = type(self._original)()
        return getattr(mine, name)


#: zuke's process-wide singletons, ``(module, name)``: each actor gets its own
PER_PROCESS = (("zuke._engine.executor", "BODIES"),)


def _pool_factory(real: type) -> Callable[..., Any]:
    def make(*args: Any, **kwargs: Any) -> Any:
        if ACTIVE is not None and current_actor.get() is not None:
            return SimExecutor(*args, **kwargs)
        return real(*args, **kwargs)

    return make


class _SimTime:
    """``time`` as a module of zuke sees it: the simulated clock inside an actor."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        if ACTIVE is not None and current_actor.get() is not None:
            return ACTIVE.clock.now_ms() / 1000
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if ACTIVE is not None and current_actor.get() is not None:
            ACTIVE.sleep(seconds)
            return
        time.sleep(seconds)


# -- installing -----------------------------------------------------------------------------

_REAL_START = threading.Thread.start
_REAL_EVENT_WAIT = threading.Event.wait
_REAL_CONDITION_WAIT = threading.Condition.wait
_REAL_CONDITION_NOTIFY = threading.Condition.notify
_REAL_EXIT = os._exit
_REAL_KILL = os.kill
_REAL_JOIN = threading.Thread.join
_REAL_UUID4 = uuid.uuid4


def _start(self: threading.Thread) -> None:
    actor = current_actor.get()
    if ACTIVE is not None and actor is not None and not hasattr(self, "_zuke_sim"):
        ACTIVE.track(self, actor)
    _REAL_START(self)


def _join(self: threading.Thread, timeout: float | None = None) -> None:
    if ACTIVE is not None:
        ACTIVE.join(self, timeout)
    _REAL_JOIN(self, timeout)


def _event_wait(self: threading.Event, timeout: float | None = None) -> bool:
    if ACTIVE is not None:
        waited = ACTIVE.wait_event(self, timeout)
        if waited is not None:
            return waited
    return _REAL_EVENT_WAIT(self, timeout)


def _system_now(self: Any) -> int:
    if ACTIVE is not None and current_actor.get() is not None:
        return ACTIVE.clock.now_ms()
    return time.time_ns() // 1_000_000


def _condition_wait(self: threading.Condition, timeout: float | None = None) -> bool:
    st = ACTIVE.me() if ACTIVE is not None else None
    if st is None:
        return _REAL_CONDITION_WAIT(self, timeout)
    seen = getattr(self, "_zuke_sim_notified", 0)
    saved = self._release_save()  # type: ignore[attr-defined]
    try:
        assert ACTIVE is not None
        return ACTIVE.wait_until(lambda: getattr(self, "_zuke_sim_notified", 0) != seen, timeout)
    finally:
        self._acquire_restore(saved)  # type: ignore[attr-defined]


def _condition_notify(self: threading.Condition, n: int = 1) -> None:
    self._zuke_sim_notified = getattr(self, "_zuke_sim_notified", 0) + 1  # type: ignore[attr-defined]
    _REAL_CONDITION_NOTIFY(self, n)


def _exit(code: int) -> None:
    """``os._exit`` inside an actor ends that actor's process, not the test's."""
    actor = current_actor.get()
    if ACTIVE is None or actor is None:
        _REAL_EXIT(code)
    assert actor is not None
    actor.dead = actor.faulted = True
    actor.exit_code = code
    raise Crash


def _kill(pid: int, sig: int) -> None:
    """An actor has no child processes: every pid it signals is gone already."""
    if ACTIVE is not None and current_actor.get() is not None:
        raise ProcessLookupError(pid)
    _REAL_KILL(pid, sig)


def _uuid4() -> uuid.UUID:
    actor = current_actor.get()
    if ACTIVE is None or actor is None:
        return _REAL_UUID4()
    return uuid.UUID(int=actor.rng.getrandbits(128), version=4)


_installed = 0


_depth = 0


@contextlib.contextmanager
def patched() -> Iterator[None]:
    """Install what makes threads, loops, pools, time and ids the active simulation's
    inside actors (outside them everything behaves as usual). Nested calls reuse the
    patches, so a campaign installs them once for all its seeds."""
    global _depth
    if _depth:
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    saved: list[tuple[Any, str, Any]] = []

    def patch(owner: Any, name: str, value: Any) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    policy = asyncio.get_event_loop_policy()
    # A killed actor's loops and futures complain as they are collected: it is dead.
    loggers = [logging.getLogger(name) for name in ("asyncio", "concurrent.futures")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    _depth = 1
    try:
        patch(threading.Thread, "start", _start)
        patch(threading.Thread, "join", _join)
        patch(threading.Event, "wait", _event_wait)
        patch(threading.Condition, "wait", _condition_wait)
        patch(threading.Condition, "notify", _condition_notify)
        patch(os, "_exit", _exit)
        patch(os, "kill", _kill)
        patch(uuid, "uuid4", _uuid4)
        patch(SystemClock, "now_ms", _system_now)  # SYSTEM_CLOCK, wherever it is a default
        singletons = {}
        for module_name, name in PER_PROCESS:
            found = getattr(sys.modules.get(module_name), name, None)
            if found is not None:
                singletons[id(found)] = _PerActor(found)
        pool = _pool_factory(concurrent.futures.ThreadPoolExecutor)
        sim_time = _SimTime()
        for name, module in sorted(sys.modules.items()):
            if not name.startswith("zuke") or module is None:
                continue
            if getattr(module, "ThreadPoolExecutor", None) is concurrent.futures.ThreadPoolExecutor:
                patch(module, "ThreadPoolExecutor", pool)
            if getattr(module, "time", None) is time:
                patch(module, "time", sim_time)
            for attr, value in list(vars(module).items()):
                if id(value) in singletons:
                    patch(module, attr, singletons[id(value)])
            for fn in list(vars(module).values()):
                defaults = getattr(fn, "__kwdefaults__", None)
                if isinstance(defaults, dict) and defaults.get("sleep") is time.sleep:
                    patch(fn, "__kwdefaults__", {**defaults, "sleep": sim_time.sleep})
        asyncio.set_event_loop_policy(SimPolicy())
        yield
    finally:
        asyncio.set_event_loop_policy(policy)
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)
        _depth = 0


@contextlib.contextmanager
def installed(sim: Sim) -> Iterator[Sim]:
    """Make ``sim`` the active simulation (patching, unless a campaign has already)."""
    global ACTIVE
    assert ACTIVE is None, "one simulation at a time"
    with patched():
        ACTIVE = sim
        try:
            yield sim
        finally:
            ACTIVE = None


#: ids for parks, so two calls with one label keep the order they arrived in
_arrival = itertools.count()
