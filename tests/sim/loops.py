"""Event loops and thread pools of a simulated process: waiting parks, never blocks.

A :class:`SimLoop` runs on the simulated clock; when it has nothing ready its
selector parks the loop's thread (with the due time of its next timer) instead of
sleeping in ``select``. A :class:`SimExecutor`'s idle workers park too, so an idle
pool never keeps the scheduler from a quiescent point.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
import threading
from collections.abc import Callable
from typing import Any

from tests.sim import runtime
from tests.sim.procs import Crash, Park, SimThread, current_actor, task_origin
from tests.sim.runtime import Sim


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
        if runtime.ACTIVE is not None and current_actor.get() is not None:
            return SimLoop(runtime.ACTIVE)
        return super().new_event_loop()


class SimExecutor(concurrent.futures.Executor):
    """A thread pool whose idle workers park, so an idle pool never blocks quiescence."""

    def __init__(self, max_workers: int | None = None, thread_name_prefix: str = "") -> None:
        assert runtime.ACTIVE is not None
        self.sim = runtime.ACTIVE
        self.prefix = thread_name_prefix or "sim-worker"
        self.idle: list[SimThread] = []
        self.closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        # Running from now on, as if a worker took it at once: a cancel that races the
        # worker's start would otherwise decide by thread timing whether the call happens.
        future.set_running_or_notify_cancel()
        item = (future, fn, args, kwargs, task_origin() or "submit")
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
