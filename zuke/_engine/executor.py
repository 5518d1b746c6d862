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
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from zuke._duration import format_duration
from zuke._engine.context import Context
from zuke._engine.plan import TargetSpec
from zuke._errors import TargetTimeoutError, ZukeError
from zuke._target import BodySpec

_HIDDEN_PREFIXES = (
    str(Path(__file__).resolve().parent.parent),
    str(Path(concurrent.futures.__file__).resolve().parent),
    str(Path(asyncio.__file__).resolve().parent),
)


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


async def _call_once(body: BodySpec, ctx: Context, pool: ThreadPoolExecutor) -> None:
    try:
        await _call_body(body, ctx, pool)
    except SystemExit as exc:
        # Never let it reach the event loop (this runs as a task of its own).
        raise ZukeError(f"the body called sys.exit({exc.code!r})") from None


async def _call_body(body: BodySpec, ctx: Context, pool: ThreadPoolExecutor) -> None:
    args = (ctx,) if body.takes_ctx else ()
    if body.is_async:
        result: Any = body.fn(*args)
    else:
        work = pool.submit(body.fn, *args)
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
    if inspect.isawaitable(result):
        await result


async def _attempt(
    spec: TargetSpec,
    body: BodySpec,
    ctx: Context,
    pool: ThreadPoolExecutor,
    notify: Callable[[str], None],
) -> None:
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


async def run_body(
    spec: TargetSpec,
    ctx: Context,
    pool: ThreadPoolExecutor,
    notify: Callable[[str], None] = lambda message: None,
) -> None:
    """Run ``spec``'s body with its retries; raise :class:`BodyFailure` on the last failure.

    Attempts run one after another: each starts after the one before has
    returned. Each gets its own ``ctx`` (and ``ctx.cancelled``), so telling a
    timed-out attempt to stop does not tell the next one.
    """
    assert spec.body is not None
    attempts = spec.retries + 1
    for attempt in range(1, attempts + 1):
        attempt_ctx = ctx.for_attempt()
        try:
            await _attempt(spec, spec.body, attempt_ctx, pool, notify)
            return
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            if isinstance(exc, SystemExit):
                exc = ZukeError(f"the body called sys.exit({exc.code!r})")
            if attempt == attempts or ctx.cancelled.is_set():
                message, detail = describe(exc)
                if attempts > 1:
                    message = f"{message} (after {attempt} attempts)"
                raise BodyFailure(message, detail) from None
        finally:
            attempt_ctx.attempt_done()
        if spec.retry_delay_ms:
            await asyncio.sleep(spec.retry_delay_ms / 1000)
