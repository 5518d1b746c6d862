"""The suite's last resort against a hang: every thread's stack, then the process ends.

pytest-timeout (``timeout = 120`` in pyproject, its signal method) fails a slow test
gently: SIGALRM raises in the test's main thread and the run goes on. It cannot when
the main thread never returns to Python to run the handler — blocked in C code that
retries on EINTR (libpq waiting on a socket), or with the signal masked — and then
CI hung with no word of where (issue 28 §7: one two-worker run hung in xdist). So
each test also arms :func:`faulthandler.dump_traceback_later` with ``exit=True`` at
:data:`HARD_TIMEOUT_S`, well past pytest-timeout's: it writes every thread's stack
to the real stderr (a copy of fd 2 taken before pytest captures it, so the dump is
not lost in a capture file) and ends the process. Under xdist the controller then
reports ``worker 'gwN' crashed while running <test>`` and the run fails.

That crash must not hang the run in turn: pytest-xdist 3.8 hangs under
``--dist loadgroup`` (and loadscope, loadfile) when it replaces a crashed worker
(pytest-dev/pytest-xdist#1323 and #1327, fixed after 3.8). So, for those schedulers
and unless ``--max-worker-restart`` was given, a crashed worker is not replaced: the
run stops, failing, with the dump above.

pytest's own ``faulthandler_timeout`` is left unset: it only dumps (never exits) and
shares faulthandler's one timer with this one.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Generator

import pytest

#: seconds one test (setup, call and teardown) may take before the process is ended
HARD_TIMEOUT_S = float(os.environ.get("ZUKE_TEST_HARD_TIMEOUT") or 300)
#: xdist's schedulers that hang on replacing a crashed worker (pytest-xdist 3.8)
HANGING_ON_RESTART = ("loadgroup", "loadscope", "loadfile")
_stderr = pytest.StashKey[int]()


def pytest_configure(config: pytest.Config) -> None:
    # Capture is suspended while plugins configure: fd 2 is still the terminal or CI's log.
    config.stash[_stderr] = os.dup(2)
    no_restart_where_it_hangs(config.option)


def no_restart_where_it_hangs(option: object) -> None:
    """``--max-worker-restart 0`` under the schedulers of :data:`HANGING_ON_RESTART`, unless
    given: a crashed worker then fails the run instead of hanging it."""
    restarts = getattr(option, "maxworkerrestart", None)
    if getattr(option, "dist", None) in HANGING_ON_RESTART and restarts is None:
        option.maxworkerrestart = 0  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    fd = config.stash.get(_stderr, None)
    if fd is not None:
        faulthandler.cancel_dump_traceback_later()
        os.close(fd)
        del config.stash[_stderr]


def hard_timeout(item: pytest.Item) -> float | None:
    """:data:`HARD_TIMEOUT_S`, or twice pytest-timeout's when that is longer (always past it:
    it gets its gentle try first); ``None`` where pytest-timeout was told 0 (no limit)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        gentle = float(marker.args[0])
    elif getattr(item.config.option, "timeout", None) is not None:
        gentle = float(item.config.option.timeout)
    else:
        try:
            gentle = float(item.config.getini("timeout") or 0)
        except ValueError:  # pytest-timeout left out (-p no:timeout): only this watchdog
            return HARD_TIMEOUT_S
    if gentle <= 0:
        return None
    return max(HARD_TIMEOUT_S, 2 * gentle)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    fd = item.config.stash.get(_stderr, None)
    hard = hard_timeout(item)
    if fd is None or hard is None:
        return (yield)
    faulthandler.dump_traceback_later(hard, exit=True, file=fd)
    try:
        return (yield)
    finally:
        faulthandler.cancel_dump_traceback_later()
