"""Pins the public surface: an API change must show up as a diff here."""

from __future__ import annotations

import pytest

import zuke

EXPECTED = [
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


def test_all_is_pinned_and_sorted() -> None:
    assert zuke.__all__ == EXPECTED
    assert sorted(zuke.__all__) == zuke.__all__


def test_every_exported_name_exists() -> None:
    missing = [name for name in zuke.__all__ if not hasattr(zuke, name)]
    assert missing == []


def test_a_lazily_loaded_name_is_the_object_its_module_defines() -> None:
    from zuke._build import Build
    from zuke._engine.context import Context
    from zuke.runs.owner import execute

    assert (zuke.execute, zuke.Context, zuke.Build) == (execute, Context, Build)
    assert set(zuke.__all__) <= set(dir(zuke))


def test_star_import_gives_every_public_name() -> None:
    namespace: dict[str, object] = {}
    exec("from zuke import *", namespace)
    assert set(zuke.__all__) - {"__version__"} <= set(namespace)


def test_a_name_zuke_does_not_export_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Scheduler'"):
        _ = zuke.Scheduler  # type: ignore[attr-defined]


def test_every_error_shares_one_root() -> None:
    errors = [getattr(zuke, n) for n in zuke.__all__ if n.endswith("Error")]
    assert errors and all(issubclass(e, zuke.ZukeError) for e in errors)


#: Internal control flow: raised and caught inside zuke, never escaping its API.
INTERNAL = {
    "zuke._engine.executor.BodyFailure",  # a body failed: the scheduler settles the target
    "zuke._serve.answers.Refusal",  # an HTTP answer of the service, sent by the app
    "zuke._serve.jsontext.NotJsonError",  # a request body that is not JSON: a 400
    "zuke._serve.ui.queries.BadQuery",  # a web view URL it cannot use: a 400 page
    "zuke._serve.ui.pages.NotFound",  # no such page or run in the web view: a 404 page
    "zuke.state._fs_index.IndexUnavailable",  # the listing index is down: list by scanning
    "zuke.state._pg_pool.PoolBusy",  # every pooled connection stayed lent: PgDatabase says so
    "zuke.state._pg_pool.PoolClosed",  # the pool was closed: PgDatabase says so
    "zuke.state._pg_pool.WaitExpired",  # a connect's time ran out: re-raised as psycopg2's
    "zuke.state._pg_listen._Hung",  # the wake connection's peer stopped answering: reconnect
    "zuke.state._pg_listen._Stopped",  # the listener was closed mid-wait: stop
}


def test_every_exception_class_zuke_defines_is_under_the_one_root() -> None:
    import importlib
    import inspect
    import pkgutil

    outside = []
    for info in pkgutil.walk_packages(zuke.__path__, "zuke."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and issubclass(cls, BaseException)):
                continue
            qualified = f"{cls.__module__}.{cls.__qualname__}"
            if cls.__module__ != info.name or qualified in INTERNAL:
                continue
            if not issubclass(cls, zuke.ZukeError):
                outside.append(qualified)
    assert outside == []


def test_a_since_that_is_no_time_is_a_zuke_error() -> None:
    from zuke.state.memory import MemoryStateStore

    with pytest.raises(zuke.StateError, match="not an ISO-8601 time"):
        MemoryStateStore().list_runs(zuke.RunQuery(since="last tuesday"))
