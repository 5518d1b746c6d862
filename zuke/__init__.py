"""zuke: release automation on durable runs.

The authoring surface (``Build``, ``@target``, ``parameter()``, ``run()``),
the errors, and the state-store result values. Everything else is private.

Only the errors load with ``import zuke``; every other name, the store's
values included, loads its module on first use (:pep:`562`): the records are
frozen dataclasses, and creating them (with ``dataclasses`` and ``inspect``)
cost ``import zuke`` about 20 ms. A build file's ``from zuke import Build,
target`` costs what it did, but a command that only reads the store (``zuke
runs list``) imports neither the authoring modules nor the engine, the
scheduler or asyncio. ``import zuke`` never loads the CLI: ``run()`` imports
it when called.
"""

from __future__ import annotations

import importlib

from zuke._errors import (
    AlreadyResumedError,
    BuildDefinitionError,
    CorruptRecordError,
    DegradedRecordError,
    DurationError,
    GraphChangedError,
    GraphError,
    LockConflictError,
    LockError,
    ParameterError,
    RunError,
    RunNotFoundError,
    RunNotSuspendedError,
    SignalRefusedError,
    StateError,
    StoreUnavailableError,
    TargetFailedError,
    TargetTimeoutError,
    UnsafeIdError,
    UsageError,
    ZukeError,
)

#: ``typing.TYPE_CHECKING`` without importing typing (8 ms here); type checkers read it alike
TYPE_CHECKING = False

if TYPE_CHECKING:  # the lazy names, as type checkers and IDEs see them
    from typing import Any

    from zuke._build import Build
    from zuke._engine.context import Context, LockInfo, StateHandle
    from zuke._engine.result import Outcome, RunResult
    from zuke._fan_out import ForEachSettings
    from zuke._lock_settings import LockSettings, lock_key
    from zuke._main import run
    from zuke._params import Parameter, parameter
    from zuke._reporting import ReportContext, RunReport, RunReporter
    from zuke._target import Target, TargetBuilder, target
    from zuke._version import __version__
    from zuke._waits import (
        GateState,
        NotYet,
        Satisfied,
        WaitContext,
        WaitFailed,
        WaitSettings,
        WaitTrigger,
        external_signal,
        resume_when,
    )
    from zuke.runs.owner import execute
    from zuke.runs.resume import ResumeOutcome, resume_run
    from zuke.runs.sweep import resume_check
    from zuke.runs.sweep_report import SweepReport
    from zuke.state._protocol import (
        Conflict,
        LockAcquired,
        LockHeld,
        LockHolder,
        RunQuery,
        StateStore,
        StoredRun,
        Written,
    )
    from zuke.state.records import Signal

#: Public name -> the module it is loaded from on first use.
_LAZY = {
    "__version__": "zuke._version",
    "Build": "zuke._build",
    "Context": "zuke._engine.context",
    "LockInfo": "zuke._engine.context",
    "StateHandle": "zuke._engine.context",
    "Outcome": "zuke._engine.result",
    "RunResult": "zuke._engine.result",
    "execute": "zuke.runs.owner",
    "ForEachSettings": "zuke._fan_out",
    "LockSettings": "zuke._lock_settings",
    "lock_key": "zuke._lock_settings",
    "run": "zuke._main",
    "Parameter": "zuke._params",
    "parameter": "zuke._params",
    "ReportContext": "zuke._reporting",
    "RunReport": "zuke._reporting",
    "RunReporter": "zuke._reporting",
    "Target": "zuke._target",
    "TargetBuilder": "zuke._target",
    "target": "zuke._target",
    "GateState": "zuke._waits",
    "NotYet": "zuke._waits",
    "Satisfied": "zuke._waits",
    "WaitContext": "zuke._waits",
    "WaitFailed": "zuke._waits",
    "WaitSettings": "zuke._waits",
    "WaitTrigger": "zuke._waits",
    "external_signal": "zuke._waits",
    "resume_when": "zuke._waits",
    "ResumeOutcome": "zuke.runs.resume",
    "resume_run": "zuke.runs.resume",
    "SweepReport": "zuke.runs.sweep_report",
    "resume_check": "zuke.runs.sweep",
    "Conflict": "zuke.state._protocol",
    "LockAcquired": "zuke.state._protocol",
    "LockHeld": "zuke.state._protocol",
    "LockHolder": "zuke.state._protocol",
    "RunQuery": "zuke.state._protocol",
    "StateStore": "zuke.state._protocol",
    "StoredRun": "zuke.state._protocol",
    "Written": "zuke.state._protocol",
    "Signal": "zuke.state.records",
}


if not TYPE_CHECKING:  # hidden from type checkers, so a misspelt name stays an error there

    def __getattr__(name: str) -> Any:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module 'zuke' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # loaded once; later look-ups are plain attributes
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AlreadyResumedError",
    "Build",
    "BuildDefinitionError",
    "Conflict",
    "Context",
    "CorruptRecordError",
    "DegradedRecordError",
    "DurationError",
    "ForEachSettings",
    "GateState",
    "GraphChangedError",
    "GraphError",
    "LockAcquired",
    "LockConflictError",
    "LockError",
    "LockHeld",
    "LockHolder",
    "LockInfo",
    "LockSettings",
    "NotYet",
    "Outcome",
    "Parameter",
    "ParameterError",
    "ReportContext",
    "ResumeOutcome",
    "RunError",
    "RunNotFoundError",
    "RunNotSuspendedError",
    "RunQuery",
    "RunReport",
    "RunReporter",
    "RunResult",
    "Satisfied",
    "Signal",
    "SignalRefusedError",
    "StateError",
    "StateHandle",
    "StateStore",
    "StoreUnavailableError",
    "StoredRun",
    "SweepReport",
    "Target",
    "TargetBuilder",
    "TargetFailedError",
    "TargetTimeoutError",
    "UnsafeIdError",
    "UsageError",
    "WaitContext",
    "WaitFailed",
    "WaitSettings",
    "WaitTrigger",
    "Written",
    "ZukeError",
    "__version__",
    "execute",
    "external_signal",
    "lock_key",
    "parameter",
    "resume_check",
    "resume_run",
    "resume_when",
    "run",
    "target",
]
