"""zuke: release automation on durable runs.

The authoring surface (``Build``, ``@target``, ``parameter()``, ``run()``),
the errors, and the state-store result values. Everything else is private.
``import zuke`` loads the engine, never the CLI: ``run()`` imports it when called.
"""

from zuke._build import Build
from zuke._engine.context import Context, LockInfo, StateHandle
from zuke._engine.result import Outcome, RunResult
from zuke._engine.run import execute
from zuke._errors import (
    BuildDefinitionError,
    CorruptRecordError,
    DurationError,
    GraphError,
    LockConflictError,
    LockError,
    ParameterError,
    RunError,
    RunNotFoundError,
    StateError,
    StoreUnavailableError,
    TargetFailedError,
    TargetTimeoutError,
    UnsafeIdError,
    UsageError,
    ZukeError,
)
from zuke._lock_settings import LockSettings, lock_key
from zuke._main import run
from zuke._params import Parameter, parameter
from zuke._target import Target, TargetBuilder, target
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

__version__ = "0.1.0"

__all__ = [
    "Build",
    "BuildDefinitionError",
    "Conflict",
    "Context",
    "CorruptRecordError",
    "DurationError",
    "GraphError",
    "LockAcquired",
    "LockConflictError",
    "LockError",
    "LockHeld",
    "LockHolder",
    "LockInfo",
    "LockSettings",
    "Outcome",
    "Parameter",
    "ParameterError",
    "RunError",
    "RunNotFoundError",
    "RunQuery",
    "RunResult",
    "Signal",
    "StateError",
    "StateHandle",
    "StateStore",
    "StoreUnavailableError",
    "StoredRun",
    "Target",
    "TargetBuilder",
    "TargetFailedError",
    "TargetTimeoutError",
    "UnsafeIdError",
    "UsageError",
    "Written",
    "ZukeError",
    "__version__",
    "execute",
    "lock_key",
    "parameter",
    "run",
    "target",
]
