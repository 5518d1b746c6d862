"""Calling one body: on a worker thread or the event loop, with timeout and retry.

A synchronous body runs on a worker thread so that it can never stall the
event loop. A thread cannot be interrupted (Python has no safe way to kill
one), so a timed-out or cancelled synchronous body is *told* to stop through
that attempt's ``ctx.cancelled`` — and then waited for. That wait is the
point: an attempt is over only when its body has returned, so

* the target's lock is held (and renewed) for exactly as long as its body
  runs, on every path — success, failure, timeout, a lost claim, a cancel;
* a retry never starts beside the attempt that timed out;
* the run settles, and the process exits, only after every body returned.

While it waits, the engine says which target it waits for.

Every body that runs is counted in :data:`BODIES`, by run and target: a claim
that cannot be renewed asks it what still runs under the claim (see
:mod:`zuke._engine.claims`, failing closed).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from zuke._duration import format_duration
from zuke._engine import body_threads
from zuke._engine.context import Context
from zuke._engine.plan import TargetSpec
from zuke._errors import TargetTimeoutError, ZukeError
from zuke._target import BodySpec

#: hands the caller what cancels the body now running (its task, or its job's future)
Register = Callable[[asyncio.Future[None]], None]

_HIDDEN_PREFIXES = (
    str(Path(__file__).resolve().parent.parent),
    str(Path(concurrent.futures.__file__).resolve().parent),
    str(Path(asyncio.__file__).resolve().parent),
)


class RunningBodies:
    """The bodies running now, by run and target: what a claim that lapses must stop.

    A claim guards a *scope*: one target (and, for a fan-out, its items'
    stages, ``target[item].stage``) or, for the run's lease, every body of the
    run (``None``). When the claim cannot be renewed, :meth:`close` shuts its
    scope — no body starts there from then on — and says what still runs in
    it: an async body can be cancelled, a synchronous one ends only with the
    process.
    """

    def __init__(self) -> None:
        #: the condition's own lock: a body's enter and leave take it directly (a C context
        #: manager; ``Condition.__enter__`` is Python, twice a body — issue 28 §1)
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._running: dict[tuple[str, str], list[int]] = {}  # [sync, async] counts
        self._closed: set[tuple[str, str | None]] = set()
        #: callers in :meth:`wait_idle`: a body's leaving notifies only when there are any
        #: (issue 28 §1: ``notify_all`` is Python code, paid by every body otherwise)
        self._waiting = 0

    @staticmethod
    def _within(target: str, scope: str | None) -> bool:
        return scope is None or target == scope or target.startswith(scope + "[")

    def enter(self, run_id: str, target: str, *, sync: bool) -> None:
        """Count a body in; raise if a lapsed claim has shut its scope."""
        with self._lock:
            if self._closed and any(
                r == run_id and self._within(target, s) for r, s in self._closed
            ):
                raise ZukeError(
                    f"{target} was not started: the claim that guards it could not be renewed"
                )
            self._running.setdefault((run_id, target), [0, 0])[0 if sync else 1] += 1

    def leave(self, run_id: str, target: str, *, sync: bool) -> None:
        with self._lock:
            counts = self._running[(run_id, target)]
            counts[0 if sync else 1] -= 1
            if counts == [0, 0]:
                del self._running[(run_id, target)]
            if self._waiting:
                self._changed.notify_all()

    def _count(self, run_id: str, scope: str | None) -> tuple[int, int]:
        found = [c for (r, t), c in self._running.items() if r == run_id and self._within(t, scope)]
        return sum(c[0] for c in found), sum(c[1] for c in found)

    def close(self, run_id: str, scope: str | None) -> tuple[int, int]:
        """Shut ``scope`` (nothing starts there any more); the (sync, async) bodies in it."""
        with self._changed:
            self._closed.add((run_id, scope))
            return self._count(run_id, scope)

    def reopen(self, run_id: str, scope: str | None) -> None:
        """The claim that shut ``scope`` is given back: forget it."""
        with self._changed:
            self._closed.discard((run_id, scope))

    def wait_idle(self, run_id: str, scope: str | None, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until no body runs in ``scope``; whether none does."""
        with self._changed:
            self._waiting += 1
            try:
                return self._changed.wait_for(
                    lambda: self._count(run_id, scope) == (0, 0), timeout_s
                )
            finally:
                self._waiting -= 1


#: The bodies of this process.
BODIES = RunningBodies()


def counted(fn: Callable[..., Any], ctx: Context, args: tuple[Any, ...]) -> Any:
    """Call a synchronous body on its worker thread, counted in :data:`BODIES`."""
    BODIES.enter(ctx.run_id, ctx.target, sync=True)
    try:
        return fn(*args)
    finally:
        BODIES.leave(ctx.run_id, ctx.target, sync=True)


async def counted_async(result: Any, ctx: Context) -> None:
    """Await an async body (or what a sync one returned), counted in :data:`BODIES`."""
    try:
        BODIES.enter(ctx.run_id, ctx.target, sync=False)
    except ZukeError:
        if inspect.iscoroutine(result):
            result.close()  # never started: no "never awaited" warning
        raise
    try:
        await result
    finally:
        BODIES.leave(ctx.run_id, ctx.target, sync=False)


class BodyFailure(Exception):
    """A body failed; ``message`` is what the failure footer shows, ``detail`` a traceback."""

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


def describe(exc: BaseException) -> tuple[str, str | None]:
    """A one-line message for an exception, and its traceback for unexpected ones."""
    if isinstance(exc, ZukeError):
        return str(exc) or type(exc).__name__, None
    text = str(exc)
    message = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    tb = traceback.TracebackException.from_exception(exc)
    # Show the user's frames, not the engine's or the thread pool's.
    tb.stack = traceback.StackSummary.from_list(
        [f for f in tb.stack if not f.filename.startswith(_HIDDEN_PREFIXES)]
    )
    detail = "".join(tb.format()).rstrip()
    return message, detail


async def settle(fut: asyncio.Future[Any], *, forward: bool = True) -> None:
    """Wait until ``fut`` is done, even if this task is cancelled meanwhile.

    A cancellation that arrives while waiting is passed on to ``fut`` (a task
    decides itself how to stop; ``forward=False`` for a thread's future, whose
    cancellation would only mark it done while the thread runs on) and is
    re-raised once ``fut`` is done: a caller never moves on while the work it
    waits for still runs.
    """
    interrupted = False
    while not fut.done():
        try:
            await asyncio.wait([fut])
        except asyncio.CancelledError:
            interrupted = True
            if forward:
                fut.cancel()
    if interrupted:
        raise asyncio.CancelledError


async def call_body(body: BodySpec, ctx: Context, pool: ThreadPoolExecutor) -> None:
    """Call ``body`` once (no timeout, no retry), waiting for it to return on every path."""
    task = asyncio.ensure_future(_call_once(body, ctx, pool))
    await settle(task)
    task.result()


async def _call_once(
    body: BodySpec, ctx: Context, pool: ThreadPoolExecutor, register: Register | None = None
) -> None:
    try:
        await _call_body(body, ctx, pool, register)
    except SystemExit as exc:
        # Never let it reach the event loop (this runs as a task of its own).
        raise ZukeError(f"the body called sys.exit({exc.code!r})") from None


async def _call_body(
    body: BodySpec, ctx: Context, pool: ThreadPoolExecutor, register: Register | None = None
) -> None:
    args = (ctx,) if body.takes_ctx else ()
    if body.is_async:
        result: Any = body.fn(*args)
    elif isinstance(pool, body_threads.BodyThreads):  # not when a test swapped the pool
        result = await _on_body_thread(pool, body, ctx, args, register)
    else:
        work = pool.submit(counted, body.fn, ctx, args)
        thread = asyncio.wrap_future(work)
        try:
            await asyncio.shield(thread)
        except asyncio.CancelledError:
            # Told to stop: say so to the body (or keep it from starting), then
            # wait for its thread to return.
            ctx.cancelled.set()
            work.cancel()
            await settle(thread, forward=False)
            raise
        result = thread.result()
    if inspect.isawaitable(result) and register is not None:
        # Awaited in the caller's task: the awaitable gets a task the caller can cancel.
        task = asyncio.ensure_future(counted_async(result, ctx))
        register(task)
        await settle(task)
        task.result()
    elif inspect.isawaitable(result):
        await counted_async(result, ctx)


async def _on_body_thread(
    pool: body_threads.BodyThreads,
    body: BodySpec,
    ctx: Context,
    args: tuple[Any, ...],
    register: Register | None,
) -> Any:
    """A synchronous body on one of the run's threads (the lean path: no thread future).

    ``register`` is given the job's future: cancelling it stops the body as cancelling
    a task of the body's own would (the caller awaits it in the target's task).
    """
    job = pool.start(counted, (body.fn, ctx, args))
    if register is not None:
        register(job.future)
    try:
        await job.future
    except asyncio.CancelledError:
        # Told to stop: say so to the body (or keep it from starting), then wait for its
        # thread to return.
        ctx.cancelled.set()
        returned = pool.stop(job)
        if returned is not None:
            await settle(returned, forward=False)
        raise
    return job.outcome()


async def _attempt(
    spec: TargetSpec,
    body: BodySpec,
    ctx: Context,
    pool: ThreadPoolExecutor,
    notify: Callable[[str], None],
    own_task: bool,
    register: Register | None = None,
) -> None:
    if spec.timeout_ms is None and not own_task:
        # Awaited directly, no task of its own: a cancellation reaches the body where it
        # waits — a thread's body is told and waited for (`_call_body`), an async one is
        # cancelled — as it would through a task.
        await _call_once(body, ctx, pool, register)
        return
    task = asyncio.ensure_future(_call_once(body, ctx, pool))
    if spec.timeout_ms is None:
        await settle(task)
        task.result()
        return
    try:
        await asyncio.wait_for(asyncio.shield(task), spec.timeout_ms / 1000)
    except TimeoutError:
        pass
    except asyncio.CancelledError:
        await settle(task)  # the cancellation reached the body too; wait until it returned
        raise
    else:
        task.result()
        return
    # Timed out. An async body is cancelled; a sync body is told through
    # ctx.cancelled. Either way the attempt ends when the body has returned.
    ctx.cancelled.set()
    task.cancel()
    if not body.is_async:
        notify(
            f"{spec.name} timed out after {format_duration(spec.timeout_ms)}; waiting for its "
            "body to return (it was told to stop through ctx.cancelled)"
        )
    with contextlib.suppress(Exception, asyncio.CancelledError):
        await settle(task)
    raise TargetTimeoutError(f"{spec.name} timed out after {format_duration(spec.timeout_ms)}")


def in_own_task(spec: TargetSpec, pool: ThreadPoolExecutor) -> bool:
    """Whether ``spec``'s body needs a task of its own for a cancellation to reach it.

    A synchronous body on the run's body threads with no timeout and no retry does not:
    its caller awaits it directly and registers the job's future (``run_body(register=
    ...)``), whose cancellation tells the body and waits for it, as the task's would.
    (A cancellation that comes once the body has returned, before its caller resumed,
    finds nothing to stop; a run being cancelled still fails the target, as an inline
    body's, in ``Scheduler._run_target``.) One task less a body.
    """
    body = spec.body
    return not (
        body is not None
        and not body.is_async
        and spec.timeout_ms is None
        and not spec.retries
        and isinstance(pool, body_threads.BodyThreads)
    )


def give_up_or_retry(exc: BaseException, attempt: int, attempts: int, ctx: Context) -> None:
    """Raise the target's :class:`BodyFailure` after its last attempt (or a cancel); else
    return, and the caller tries again."""
    if isinstance(exc, SystemExit):
        exc = ZukeError(f"the body called sys.exit({exc.code!r})")
    if attempt == attempts or ctx.cancelled.is_set():
        message, detail = describe(exc)
        if attempts > 1:
            message = f"{message} (after {attempt} attempts)"
        raise BodyFailure(message, detail) from None


async def run_body(
    spec: TargetSpec,
    ctx: Context,
    pool: ThreadPoolExecutor,
    notify: Callable[[str], None] = lambda message: None,
    *,
    own_task: bool = True,
    register: Register | None = None,
) -> None:
    """Run ``spec``'s body with its retries; raise :class:`BodyFailure` on the last failure.

    Attempts run one after another: each starts after the one before has
    returned. Each gets its own ``ctx`` (and ``ctx.cancelled``), so telling a
    timed-out attempt to stop does not tell the next one. ``own_task=False``
    awaits an attempt without a timeout directly (one task less a body); a
    caller racing the body against a claim's loss keeps the task.
    """
    assert spec.body is not None
    attempts = spec.retries + 1
    for attempt in range(1, attempts + 1):
        attempt_ctx = ctx.for_attempt()
        try:
            await _attempt(spec, spec.body, attempt_ctx, pool, notify, own_task, register)
            return
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            give_up_or_retry(exc, attempt, attempts, ctx)
        finally:
            attempt_ctx.attempt_done()
        if spec.retry_delay_ms:
            await asyncio.sleep(spec.retry_delay_ms / 1000)
