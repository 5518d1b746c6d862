"""Reports from outside the run's own process: a sweep's, and ``zuke cancel``'s.

The live process tells a build's reporters of every move it makes
(:class:`zuke._engine.reporters.ReporterObserver`). A run moved elsewhere — its gates asked
again by a sweep, settled by a timeout's rollback, cancelled by ``zuke cancel`` — is reported
here, with the build loaded under the run's recorded parameters (secrets from this process's
environment, as for a resume). A sweep reports each run it looked at, so a reporter whose
write failed (GitHub down, its budget spent) catches up at the next sweep: the retry of issue
26 §2. A build that lists no reporters costs nothing here (its class is asked, never loaded).
"""

from __future__ import annotations

from zuke._build import Build
from zuke._engine.reporters import Teller, reporters_of
from zuke._engine.run import LoadedBuild, RunOptions
from zuke._errors import ZukeError
from zuke._reporting import ReportKind
from zuke.runs.lifecycle import load_for
from zuke.state._protocol import StateStore
from zuke.state.records import RunRecord


def reports(build_cls: type[Build]) -> bool:
    """Whether ``build_cls`` may list reporters (it overrides :meth:`Build.reporters`)."""
    return getattr(build_cls, "reporters", Build.reporters) is not Build.reporters


async def report_run(
    build_cls: type[Build],
    store: StateStore,
    run_id: str,
    kind: ReportKind,
    *,
    run: RunOptions,
    actor: str,
    loaded: LoadedBuild | None = None,
) -> int:
    """Tell the build's reporters that ``run_id`` moved (``kind``), as it is stored now; the
    number of reporters that failed (each said through ``run.on_warning``). Never raises for
    a reporter's sake: a run whose build will not load is said in one line and skipped.
    ``loaded``: the build already loaded for this run (a sweep's prefetch), else loaded here."""
    if not reports(build_cls):
        return 0
    found = store.get_run(run_id)
    if found is None:
        return 0
    record: RunRecord = found.record
    try:
        loaded = loaded or load_for(build_cls, record, run)
        reporters = reporters_of(loaded.build)
    except ZukeError as exc:
        run.on_warning(f"zuke: run {run_id} was not reported: {exc}")
        return 1
    if not reporters:
        return 0
    teller = Teller(reporters, store=store, run_id=run_id, redactor=loaded.redactor,
                    env=run.env, actor=actor, warn=run.on_warning,
                    clock=run.clock)  # fmt: skip

    def view() -> RunRecord:  # the record read above: what ctx.stored() answers too, until
        teller.known = teller.known or record  # a remember() writes a newer one
        return record

    return await teller.tell(kind, view)


__all__ = ["report_run", "reports"]
