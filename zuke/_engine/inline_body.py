"""A synchronous body called on the event loop's own thread, when nothing else needs the loop.

The run's only work (see :mod:`zuke._engine.loop_thread`) skips the hop to a
worker thread and back: the loop would stand idle meanwhile anyway. Which bodies
qualify, and how they are called so that they cannot tell the difference.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from zuke._engine.context import Context
from zuke._engine.executor import counted, counted_async, give_up_or_retry, settle
from zuke._engine.plan import TargetSpec
from zuke._errors import ZukeError
from zuke._target import BodySpec


def inlinable(spec: TargetSpec) -> bool:
    """Whether ``spec``'s body may run on the loop's thread when nothing else needs the loop.

    A plain synchronous body with no timeout (a timeout is a timer on the loop)
    and no pause between retries; a lock, a gate or effects keep the thread.
    """
    body = spec.body
    return (
        body is not None
        and not body.is_async
        and spec.timeout_ms is None
        and not (spec.retries and spec.retry_delay_ms)
        and spec.lock is None
        and spec.wait is None
        and spec.fan_out is None
        and not spec.effects
    )


def _call_inline(body: BodySpec, ctx: Context) -> Any:
    """Call a synchronous body on this thread, the event loop's, counted in :data:`BODIES`.

    The loop stands still meanwhile, so the body is called as if on a thread of
    its own: no running loop (``asyncio.run()`` inside it works as on a worker
    thread), restored afterwards.
    """
    args = (ctx,) if body.takes_ctx else ()
    loop = asyncio.events._get_running_loop()
    asyncio.events._set_running_loop(None)
    try:
        return counted(body.fn, ctx, args)
    except SystemExit as exc:
        raise ZukeError(f"the body called sys.exit({exc.code!r})") from None
    finally:
        asyncio.events._set_running_loop(loop)


async def run_body_inline(
    spec: TargetSpec,
    ctx: Context,
    register: Callable[[asyncio.Future[None]], None],
) -> None:
    """:func:`run_body` for an :func:`inlinable` spec, its body called on the loop's thread.

    No task and no thread hop: the caller is the only work of the run meanwhile.
    What the body returns, if awaitable, is awaited as a body task of its own
    (``register``ed, so that a cancellation reaches it as before).
    """
    assert spec.body is not None
    attempts = spec.retries + 1
    for attempt in range(1, attempts + 1):
        attempt_ctx = ctx.for_attempt()
        try:
            result = _call_inline(spec.body, attempt_ctx)
            if result is not None and inspect.isawaitable(result):  # most bodies return None
                task = asyncio.ensure_future(counted_async(result, attempt_ctx))
                register(task)
                await settle(task)
                task.result()
            return
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except BaseException as exc:
            give_up_or_retry(exc, attempt, attempts, ctx)
        finally:
            attempt_ctx.attempt_done()
