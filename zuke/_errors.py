"""Every error zuke raises, under one root.

    ZukeError
    ├── BuildDefinitionError        a build that cannot be planned (bad reference, cycle, setting)
    │   ├── GraphError              unknown target reference or dependency cycle
    │   └── DurationError           a duration string that does not parse (also a ValueError)
    ├── ParameterError              a parameter value that is missing or invalid (also a ValueError)
    ├── UsageError                  a command line that cannot be acted on (exit 2)
    ├── TargetFailedError           raise it in a body to fail with just your message
    │   └── TargetTimeoutError      a body ran past its timeout (also a TimeoutError)
    ├── StateError                  the state store is unusable
    │   ├── StoreUnavailableError   the store could not be reached or answered badly
    │   │   └── StoreRefusedError   it answered: not until someone acts (retrying won't help)
    │   ├── CorruptRecordError      a stored record does not parse
    │   ├── UnsafeIdError           a run id or lock key that could escape the store (a ValueError)
    │   ├── LockTtlError            a lock TTL out of bounds (a ValueError; state/_ids)
    │   ├── InvalidQueryError       a RunQuery that cannot apply: ``since`` no time (state/_query)
    │   ├── InsecureStateUrlError   a plaintext or credential-leaking state URL (state/_http_wire)
    │   ├── StoreSettingError       a store setting that names no usable store (also a UsageError:
    │   │                           exit 2; state/resolve)
    │   └── DbClosedError           zuke serve's database is closed (_serve/db)
    ├── LockError
    │   └── LockConflictError       another run holds the lock (message = guidance)
    ├── RunError                    resume / cancel / show on a run that does not allow it
    │   ├── RunNotFoundError
    │   ├── RunNotSuspendedError    resume of a run that is not suspended (``.status``)
    │   ├── AlreadyResumedError     another resumer won the compare-and-swap (``.by``)
    │   ├── SignalRefusedError      a signal that cannot be delivered (after a timeout, bad data)
    │   │   └── UnknownSignalError  no gate of the run waits for it (also a UsageError: exit 2)
    │   ├── GraphChangedError       resume of a run whose graph the build no longer has
    │   ├── DegradedRecordError     resume of a record with lost writes (``--resume-degraded``)
    │   ├── ForeignRunError         the run belongs to another build (runs/lifecycle)
    │   └── LeaseLostError          a transition could not prove it holds the run's lease
    ├── TriggerAccessError          a trigger's service refuses this process (a sweep goes red)
    └── ServeStartError             a zuke serve process did not start (testing/serve)

A lock lost while its target runs is an outcome, not an exception: the target
fails with the loss in its error and the run's ``stop_reason`` says why it
stopped (no ``LockLostError``: nothing could raise it to a caller).
Internal control flow never leaves zuke: ``BodyFailure`` (the engine),
``Refusal`` and ``NotJsonError`` (zuke serve's answers), ``IndexUnavailable``
(the filesystem listing falls back to a scan); ``tests/test_public_api.py``
checks that every other exception class zuke defines is under this root.
Stdlib errors zuke lets through are the stdlib's protocols:
``AttributeError`` from a module's ``__getattr__``, ``NotImplementedError``
from a contract-suite hook a subclass must override.

Messages never contain secret values: secrets are redacted before they can
reach an exception raised by zuke.
"""

from __future__ import annotations

#: ``typing.TYPE_CHECKING`` without importing typing: ``import zuke`` loads this module only
TYPE_CHECKING = False

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
    """A target's body failed. Raise it (or any ZukeError) to fail with just the message."""


class TargetTimeoutError(TargetFailedError, TimeoutError):
    """A target's body ran past its timeout."""


class StateError(ZukeError):
    """The state store cannot be used."""


class StoreUnavailableError(StateError):
    """The store could not be reached, or answered with something other than a result."""


class StoreRefusedError(StoreUnavailableError):
    """The store answered and refuses until someone acts (a deleted GitHub state branch, an
    empty repository): its message says what to do, and retrying does not help."""


class StoreSettingError(StateError, UsageError):
    """A store setting (``ZUKE_STATE``, ``ZUKE_STATE_DIR``, …) that names no usable store: the
    operator's to fix, so a usage error (exit 2), before anything is read or written."""


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


class RunError(ZukeError):
    """A run-management operation that the run's state does not allow."""

    def __init__(self, message: str, *, run_id: str | None = None) -> None:
        super().__init__(message)
        self.run_id = run_id


class RunNotFoundError(RunError):
    """No run with that id in the store."""


class RunNotSuspendedError(RunError):
    """``zuke resume`` of a run that is not suspended; ``status`` is what it is."""

    def __init__(self, message: str, *, run_id: str, status: str) -> None:
        super().__init__(message, run_id=run_id)
        self.status = status


class AlreadyResumedError(RunError):
    """Another process resumed the run first (or holds it): this resume did nothing."""

    def __init__(self, message: str, *, run_id: str, by: str | None = None) -> None:
        super().__init__(message, run_id=run_id)
        self.by = by


class SignalRefusedError(RunError):
    """A signal that cannot be delivered: its gate timed out, or its payload is invalid."""


class UnknownSignalError(SignalRefusedError, UsageError):
    """No gate of the run waits for this signal (a typo): refused, nothing stored."""


class ForeignRunError(RunError):
    """The run belongs to another build."""


class LeaseLostError(RunError):
    """A transition could not prove it still holds the run's lease: it stopped before
    writing or calling anything more (another process may own the run now)."""


class TriggerAccessError(ZukeError):
    """A gate's trigger cannot reach what it waits on with this process's credentials (a
    token refused, a repository out of its reach): asking again will not help until someone
    acts, so a sweep that meets it fails (exit 1) and leaves the run waiting. Its message
    names the credential and what to check."""


class GraphChangedError(RunError):
    """The build's graph no longer matches the run's (``--force-graph`` overrides)."""


class DegradedRecordError(RunError):
    """The run's record lost writes; resuming could repeat work (``--resume-degraded``)."""
