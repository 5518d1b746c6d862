"""Calling one body: on a worker thread or the event loop, with timeout and retry.

A synchronous body runs on a worker thread so that it can never stall the
event loop, where the heartbeats that keep the run's lease and locks alive are
timers. A timed-out synchronous body cannot be interrupted (Python has no safe
way to kill a thread): the attempt fails, that attempt's ``ctx.cancelled`` is
set so a cooperative body returns, and the thread is left to finish on its own.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import traceback
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


async def _call_once(body: BodySpec, ctx: Context, pool: ThreadPoolExecutor) -> None:
    args = (ctx,) if body.takes_ctx else ()
    if body.is_async:
        result: Any = body.fn(*args)
    else:
        thread = pool.submit(body.fn, *args)
        try:
            result = await asyncio.wrap_future(thread)
        except asyncio.CancelledError:
            if not thread.done():
                ctx.orphaned(thread)  # still running: whatever it holds must outlive it
            raise
    if inspect.isawaitable(result):
        await result


async def _attempt(
    spec: TargetSpec, body: BodySpec, ctx: Context, pool: ThreadPoolExecutor
) -> None:
    if spec.timeout_ms is None:
        await _call_once(body, ctx, pool)
        return
    task = asyncio.ensure_future(_call_once(body, ctx, pool))
    try:
        await asyncio.wait_for(asyncio.shield(task), spec.timeout_ms / 1000)
    except TimeoutError:
        # An async body stops here. A sync body's thread cannot be stopped: its
        # ctx.cancelled is set so that a cooperative body returns early.
        ctx.cancelled.set()
        task.cancel()
        raise TargetTimeoutError(
            f"{spec.name} timed out after {format_duration(spec.timeout_ms)}"
        ) from None


async def run_body(spec: TargetSpec, ctx: Context, pool: ThreadPoolExecutor) -> None:
    """Run ``spec``'s body with its retries; raise :class:`BodyFailure` on the last failure.

    Each attempt gets its own ``ctx`` (and ``ctx.cancelled``), so an attempt that
    timed out and still runs on its thread is told to stop without the next
    attempt seeing that.
    """
    assert spec.body is not None
    attempts = spec.retries + 1
    for attempt in range(1, attempts + 1):
        attempt_ctx = ctx.for_attempt()
        try:
            await _attempt(spec, spec.body, attempt_ctx, pool)
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
