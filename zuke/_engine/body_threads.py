"""The run's worker threads for synchronous bodies, handing results back in batches.

A fan-out runs hundreds of short synchronous bodies, up to its concurrency
at once, each on a worker thread. Through ``ThreadPoolExecutor.submit`` and
``asyncio.wrap_future`` every body costs a ``concurrent.futures.Future`` (a
``Condition``), a chained loop future, a shield and a wake-up of the loop of
its own. :class:`BodyThreads` is the run's pool with a leaner path beside
``submit``: a job is a loop future and a slot for what the body returned; a
worker that finishes one queues it and wakes the loop only if no wake-up is
pending already, and the loop hands back every job queued by then in one
callback. Bodies that end together (the usual case for short ones) cost one
wake-up between them.

A job is never abandoned: a caller that stops waiting (a timeout, a cancel)
calls :meth:`BodyThreads.stop`, which keeps a job that has not started from
ever starting and otherwise gives a future that resolves when the body has
returned — the executor waits for it, as it waited for the thread's future.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import weakref
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

_QUEUED, _RUNNING, _CANCELLED, _DONE = range(4)


class Job:
    """One body call: its loop future (resolved when the loop has the outcome), its outcome."""

    __slots__ = ("args", "error", "fn", "future", "handed", "state", "value")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...], future: asyncio.Future[None]):
        self.fn = fn
        self.args = args
        self.future = future
        self.state = _QUEUED
        self.value: Any = None
        self.error: BaseException | None = None
        #: the loop has resolved ``future`` (the outcome is the caller's now)
        self.handed = False

    def outcome(self) -> Any:
        """What the call returned; raises what it raised."""
        error, self.error = self.error, None  # no cycle through the traceback's frames
        if error is not None:
            raise error
        return self.value


class BodyThreads(ThreadPoolExecutor):
    """A run's thread pool: ``submit`` as ever, and :meth:`start` for bodies (see module).

    Threads start as jobs need them, up to ``max_workers`` (a job beyond waits
    for a thread, as with ``submit``), and end at :meth:`shutdown` once their
    job, if any, has returned. One event loop uses the lean path: the first
    that calls :meth:`start`.
    """

    def __init__(self, max_workers: int, thread_name_prefix: str = "") -> None:
        super().__init__(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
        self._limit = max_workers
        self._prefix = thread_name_prefix or "zuke-body"
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        #: idle threads less queued jobs (negative: jobs wait for a thread)
        self._spare = 0
        self._closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        #: jobs whose body returned, not yet handed back on the loop
        self._finished: deque[Job] = deque()
        #: a hand-back is queued on the loop (the next finished job needs no wake-up)
        self._waking = False
        _LIVE.add(self)

    def start(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> Job:
        """Call ``fn(*args)`` on a worker thread; await the job's ``future``, then ``outcome()``.

        Called on the event loop's thread.
        """
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError("BodyThreads serves one event loop")
        job = Job(fn, args, loop.create_future())
        name = None
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot start a body after the run's threads shut down")
            self._spare -= 1
            if self._spare < 0 and self._workers < self._limit:
                name = f"{self._prefix}_{self._workers}"
                self._workers += 1
                self._spare += 1
        self._jobs.put(job)
        if name is not None:
            threading.Thread(target=self._work, name=name).start()
        return job

    def stop(self, job: Job) -> asyncio.Future[None] | None:
        """The caller stops waiting for ``job`` (on the loop's thread): ``None`` if its body
        never runs (it had not started) or its outcome was handed back already; else a
        future that resolves once the body has returned."""
        with self._lock:
            if job.state == _QUEUED:
                job.state = _CANCELLED
                return None
            if job.handed or job.state == _CANCELLED:
                return None
            # Running, or returned and queued for the hand-back: that resolves this one.
            job.future = asyncio.get_running_loop().create_future()
            return job.future

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is None:
                return
            with self._lock:
                run = job.state == _QUEUED
                job.state = _RUNNING if run else job.state
            if run:
                try:
                    job.value = job.fn(*job.args)
                except BaseException as exc:  # handed to the awaiting body, as a thread's future
                    job.error = exc
                job.fn = job.args = None  # type: ignore[assignment]
            with self._lock:
                self._spare += 1
                if not run:
                    continue
                job.state = _DONE
                self._finished.append(job)
                wake, self._waking = not self._waking, True
            del job
            if wake:
                loop = self._loop
                assert loop is not None
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(self._hand_back)

    def _hand_back(self) -> None:
        """On the loop: resolve every job finished since the last hand-back."""
        with self._lock:
            self._waking = False
            finished, self._finished = self._finished, deque()
        for job in finished:
            job.handed = True
            if not job.future.done():
                job.future.set_result(None)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Shut ``submit``'s threads down as ever; the body threads end once idle."""
        super().shutdown(wait=wait, cancel_futures=cancel_futures)
        with self._lock:
            if self._closed:
                return
            self._closed = True
            workers = self._workers
        for _ in range(workers):
            self._jobs.put(None)


#: every pool not shut down yet: at interpreter exit their idle threads are told to end
#: (as ``concurrent.futures`` does for its own), so they never hold the process open
_LIVE: weakref.WeakSet[BodyThreads] = weakref.WeakSet()


def _at_exit() -> None:
    for pool in list(_LIVE):
        pool.shutdown(wait=False)


threading._register_atexit(_at_exit)  # type: ignore[attr-defined]
