"""The simulation's runtime: every thread, event loop, timer and store call an actor makes
is held until the scheduler lets it go, so one seed is one interleaving.

An *actor* is a process (an owner, a resumer, a sweeper, ...). It runs on a thread
of its own; every thread it starts (asyncio's workers, the body pool, heartbeats,
the compensation walk's thread) is *tracked*: it counts as running until it parks
at one of four places, and only there:

* a **store call** (:meth:`Sim.call`): held until the scheduler grants it;
* a **timer**: an event loop with nothing ready (its ``select``), or a timed wait
  on a thread (a heartbeat's ``Event.wait``, :meth:`Sim.sleep`) — on the simulated
  clock, which moves only when the scheduler advances it;
* an **idle worker** of a pool, or a thread **joining** another.

When no tracked thread runs (*quiescence*), the scheduler picks the next move
(:mod:`tests.sim.world`). Between two moves only the threads of the actor
that was let go run, so what they do is decided by the moves alone.

Actor identity travels in a :class:`contextvars.ContextVar` (``asyncio.to_thread``
copies it; :func:`tests.sim.patches.installed` makes ``threading.Thread.start`` copy
it too). Event loops and pools are :mod:`tests.sim.loops`; what is patched, and why,
is :mod:`tests.sim.patches`; the actor, its threads and their parks are
:mod:`tests.sim.procs`.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import math
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tests.sim.procs import (
    Actor,
    Crash,
    HarnessStuck,
    Park,
    SimThread,
    current_actor,
    stable_name,
    task_origin,
)
from zuke._clock import ManualClock
from zuke._errors import StoreUnavailableError

if TYPE_CHECKING:
    from tests.sim.loops import SimExecutor

#: real seconds the scheduler waits for quiescence before it calls the harness stuck
QUIET_TIMEOUT_S = 20.0


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
        st = SimThread(actor, thread.name, origin=f"thread:{stable_name(thread.name)}")
        context = contextvars.copy_context()
        context.run(current_actor.set, actor)
        body = thread.run

        def run() -> None:
            self._local.me = st
            st.ident = threading.get_ident()
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
        origin = task_origin() or st.origin
        park = Park("call", label=f"{st.actor.name}|{origin}|{label}")
        if self._park(st, park) == "die":
            raise Crash
        lose, st.lose = st.lose, None
        if self.clock.now_ms() < st.actor.cut_until:
            raise StoreUnavailableError(f"state: {st.actor.name} is cut off from the store (sim)")
        result = fn()
        if lose is not None:
            raise lose()  # it landed; the answer is lost (tests.sim.faults)
        return result

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
        frames = thread_frames()
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


def thread_frames() -> dict[int, Any]:
    """``sys._current_frames()`` with the garbage collector held off. CPython 3.11 makes the
    other threads' frame objects while it holds the runtime's thread list; a collection
    started by one of those allocations that frees a ``threading.local`` (an earlier
    seed's :class:`Sim`, in a cycle) takes that lock again and the process hangs for ever
    — a hot campaign over Postgres stopped so (gdb: ``local_clear`` under
    ``_current_frames``), in :meth:`tests.sim.world.World._directed`."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


_REAL_START = threading.Thread.start
