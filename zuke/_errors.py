"""Every error zuke raises, under one root.

    ZukeError
    ├── BuildDefinitionError      a build that cannot be planned (bad reference, cycle, setting)
    │   ├── GraphError            unknown target reference or dependency cycle
    │   └── DurationError         a duration string that does not parse
    ├── ParameterError            a parameter value that is missing or invalid
    ├── UsageError                a command line that cannot be acted on (exit 2)
    ├── TargetFailedError         a body failed (wraps the cause's message)
    │   └── TargetTimeoutError    a body ran past its timeout
    ├── StateError                the state store is unusable
    │   ├── StoreUnavailableError the store could not be reached or answered badly
    │   ├── CorruptRecordError    a stored record does not parse
    │   └── UnsafeIdError         a run id or lock key that could escape the store
    ├── LockError
    │   ├── LockConflictError     another run holds the lock (message = guidance)
    │   └── LockLostError         a renewal was refused: the claim changed hands
    └── RunError                  resume / cancel / show on a run that does not allow it
        └── RunNotFoundError

Messages never contain secret values: secrets are redacted before they can
reach an exception raised by zuke.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zuke.state._protocol import LockHolder


class ZukeError(Exception):
    """The root of every error zuke raises."""


class BuildDefinitionError(ZukeError):
    """The build's definition is wrong: fix the build file."""


class GraphError(BuildDefinitionError):
    """An unknown target reference or a dependency cycle."""


class DurationError(BuildDefinitionError, ValueError):
    """A duration that does not parse."""


class ParameterError(ZukeError, ValueError):
    """One or more parameters are missing or invalid."""


class UsageError(ZukeError):
    """The command line cannot be acted on."""


class TargetFailedError(ZukeError):
    """A target's body failed."""


class TargetTimeoutError(TargetFailedError, TimeoutError):
    """A target's body ran past its timeout."""


class StateError(ZukeError):
    """The state store cannot be used."""


class StoreUnavailableError(StateError):
    """The store could not be reached, or answered with something other than a result."""


class CorruptRecordError(StateError):
    """A stored record is not valid."""


class UnsafeIdError(StateError, ValueError):
    """A run id or lock key that is not ``[A-Za-z0-9._-]+``."""


class LockError(ZukeError):
    """A cross-run lock could not be held."""


class LockConflictError(LockError):
    """Another run holds the lock. The message is the rendered guidance."""

    def __init__(self, holder: LockHolder, message: str) -> None:
        super().__init__(message)
        self.holder = holder


class LockLostError(LockError):
    """A renewal was refused: the claim belongs to someone else now."""


class RunError(ZukeError):
    """A run-management operation that the run's state does not allow."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunNotFoundError(RunError):
    """No run with that id in the store."""
