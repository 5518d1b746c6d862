"""What the simulation patches while it runs, and why: inside an actor, threads, waits,
time, ids, pools and exits are the simulation's; outside one, everything is as usual.

* ``threading.Thread.start`` tracks a thread an actor starts (and copies its context);
  ``Thread.join``, ``Event.wait`` and ``Condition.wait`` park instead of blocking, with
  their timeouts on the simulated clock;
* ``SystemClock.now_ms`` (behind ``SYSTEM_CLOCK``, a default in several places), the
  ``time`` module as zuke's modules see it, and ``sleep=time.sleep`` defaults read and
  wait on the simulated clock;
* ``uuid.uuid4`` (and ``new_run_id``, which reads ``os.urandom``) draws from the actor's
  own generator, so ids do not depend on which actor ran first;
* zuke's ``ThreadPoolExecutor`` (and the run's ``BodyThreads``) is a
  :class:`~tests.sim.loops.SimExecutor`, and new
  event loops are :class:`~tests.sim.loops.SimLoop` (an event loop policy);
* ``os._exit`` ends the actor (a crash), ``os.kill`` finds no child process;
* zuke's process-wide singletons (:data:`PER_PROCESS`) are one per actor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import zuke._engine.run as engine_run
from tests.sim import runtime
from tests.sim.loops import SimExecutor, SimPolicy
from tests.sim.procs import Actor, Crash, current_actor
from tests.sim.runtime import _REAL_START, Sim
from zuke._clock import SystemClock
from zuke._engine.body_threads import BodyThreads


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
        if runtime.ACTIVE is not None and current_actor.get() is not None:
            return SimExecutor(*args, **kwargs)
        return real(*args, **kwargs)

    return make


class _SimTime:
    """``time`` as a module of zuke sees it: the simulated clock inside an actor."""

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)

    def monotonic(self) -> float:
        if runtime.ACTIVE is not None and current_actor.get() is not None:
            return runtime.ACTIVE.clock.now_ms() / 1000
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        if runtime.ACTIVE is not None and current_actor.get() is not None:
            runtime.ACTIVE.sleep(seconds)
            return
        time.sleep(seconds)


_REAL_EVENT_WAIT = threading.Event.wait
_REAL_CONDITION_WAIT = threading.Condition.wait
_REAL_CONDITION_NOTIFY = threading.Condition.notify
_REAL_EXIT = os._exit
_REAL_KILL = os.kill
_REAL_JOIN = threading.Thread.join
_REAL_UUID4 = uuid.uuid4


def _start(self: threading.Thread) -> None:
    actor = current_actor.get()
    if runtime.ACTIVE is not None and actor is not None and not hasattr(self, "_zuke_sim"):
        runtime.ACTIVE.track(self, actor)
    _REAL_START(self)


def _join(self: threading.Thread, timeout: float | None = None) -> None:
    if runtime.ACTIVE is not None:
        runtime.ACTIVE.join(self, timeout)
    _REAL_JOIN(self, timeout)


def _event_wait(self: threading.Event, timeout: float | None = None) -> bool:
    if runtime.ACTIVE is not None:
        waited = runtime.ACTIVE.wait_event(self, timeout)
        if waited is not None:
            return waited
    return _REAL_EVENT_WAIT(self, timeout)


def _system_now(self: Any) -> int:
    if runtime.ACTIVE is not None and current_actor.get() is not None:
        return runtime.ACTIVE.clock.now_ms()
    return time.time_ns() // 1_000_000


def _condition_wait(self: threading.Condition, timeout: float | None = None) -> bool:
    st = runtime.ACTIVE.me() if runtime.ACTIVE is not None else None
    if st is None:
        return _REAL_CONDITION_WAIT(self, timeout)
    seen = getattr(self, "_zuke_sim_notified", 0)
    saved = self._release_save()  # type: ignore[attr-defined]
    try:
        assert runtime.ACTIVE is not None
        return runtime.ACTIVE.wait_until(
            lambda: getattr(self, "_zuke_sim_notified", 0) != seen, timeout
        )
    finally:
        self._acquire_restore(saved)  # type: ignore[attr-defined]


def _condition_notify(self: threading.Condition, n: int = 1) -> None:
    self._zuke_sim_notified = getattr(self, "_zuke_sim_notified", 0) + 1  # type: ignore[attr-defined]
    _REAL_CONDITION_NOTIFY(self, n)


def _exit(code: int) -> None:
    """``os._exit`` inside an actor ends that actor's process, not the test's."""
    actor = current_actor.get()
    if runtime.ACTIVE is None or actor is None:
        _REAL_EXIT(code)
    assert actor is not None
    actor.dead = actor.faulted = True
    actor.exit_code = code
    raise Crash


def _kill(pid: int, sig: int) -> None:
    """An actor has no child processes: every pid it signals is gone already."""
    if runtime.ACTIVE is not None and current_actor.get() is not None:
        raise ProcessLookupError(pid)
    _REAL_KILL(pid, sig)


def _uuid4() -> uuid.UUID:
    actor = current_actor.get()
    if runtime.ACTIVE is None or actor is None:
        return _REAL_UUID4()
    return uuid.UUID(int=actor.rng.getrandbits(128), version=4)


def _run_id_from(real: Callable[[], str]) -> Callable[[], str]:
    """``new_run_id`` (``os.urandom``, not ``uuid4``) drawn from the actor's generator too."""

    def new_run_id() -> str:
        if runtime.ACTIVE is None or current_actor.get() is None:
            return real()
        return str(_uuid4())

    return new_run_id


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
        patch(engine_run, "new_run_id", _run_id_from(engine_run.new_run_id))
        singletons = {}
        for module_name, name in PER_PROCESS:
            found = getattr(sys.modules.get(module_name), name, None)
            if found is not None:
                singletons[id(found)] = _PerActor(found)
        pool = _pool_factory(concurrent.futures.ThreadPoolExecutor)
        body_pool = _pool_factory(BodyThreads)
        sim_time = _SimTime()
        for name, module in sorted(sys.modules.items()):
            if not name.startswith("zuke") or module is None:
                continue
            if getattr(module, "ThreadPoolExecutor", None) is concurrent.futures.ThreadPoolExecutor:
                patch(module, "ThreadPoolExecutor", pool)
            if getattr(module, "BodyThreads", None) is BodyThreads:  # the run's pool (drive.py)
                patch(module, "BodyThreads", body_pool)
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
    assert runtime.ACTIVE is None, "one simulation at a time"
    with patched():
        runtime.ACTIVE = sim
        try:
            yield sim
        finally:
            runtime.ACTIVE = None
