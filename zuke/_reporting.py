"""The public reporter seam: :class:`RunReporter`, told of a run's moves (issue 26 §2).

A build lists its reporters in :meth:`Build.reporters`, as it names its store in
``state_store``. Whichever process moves the run tells them — the one that runs it (the run
created or resumed, each target started and ended, the run suspended at its gates or
finished), a sweep (each run it checked or settled: a gate that timed out, a rollback) and
``zuke cancel`` (a run it cancelled) — with a :class:`RunReport`: what happened, and the run
record as it stands. That is what ``zuke_gh.github_deployments`` mirrors to GitHub's
Deployments, and what a user implements to post to chat or a status page.

A reporter mirrors; it never steers. What it raises is reported in one line (a warning of the
run, a note of the sweep) and swallowed: a release never fails because a chat service is down,
and the next sweep reports the run again, so a reporter that **reconciles** (compares the record
with what it last sent, sends only the difference) catches up. What it must remember across
processes (an id it created) it keeps with :meth:`ReportContext.remember`, an append to the
run's record that needs no lease, read back with :meth:`ReportContext.recall` — so it can
persist its intent *before* an outside call and find, after a crash, that the call was made.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from zuke.state.records import RunRecord

#: what happened: the run was created (its first record) or resumed in a new process; a target
#: started or ended (``target`` says which); the run suspended at its gates, or finished
#: (succeeded, failed or cancelled: ``record.status`` says); a sweep looked at it again (its
#: gates still waiting, or settled by their disposition); ``zuke cancel`` cancelled it
ReportKind = Literal[
    "created", "resumed", "target-started", "target-ended", "suspended", "finished", "swept",
    "cancelled",
]  # fmt: skip


class RunReport:
    """One move of a run, and the run as it stands after it (``record``: read when first
    asked, so a reporter that looks only at ``kind`` costs nothing per transition)."""

    def __init__(
        self, kind: ReportKind, view: Callable[[], RunRecord], *, target: str | None = None
    ) -> None:
        self.kind: ReportKind = kind
        #: the target that started or ended (``target-started`` / ``target-ended``)
        self.target = target
        self._view = view
        self._record: RunRecord | None = None

    @property
    def record(self) -> RunRecord:
        """The run record now: statuses, each target's ``environment`` and
        ``environment_url``, what its gates wait for (``waiting_for``), its events."""
        if self._record is None:
            self._record = self._view()
        return self._record

    def __repr__(self) -> str:
        return f"RunReport({self.kind!r}, target={self.target!r})"


class ReportContext:
    """What a reporter may use besides the report: its memory in the record, this process's
    job URL, the masking of secrets, and one-line warnings."""

    def __init__(
        self,
        reporter: str,
        *,
        remember: Callable[[str, Mapping[str, str], str | None], Awaitable[None]],
        recall: Callable[[], RunRecord],
        redact: Callable[[str], str],
        env: Mapping[str, str],
        job_url: str | None,
        warn: Callable[[str], None],
    ) -> None:
        self._name = reporter
        self._remember = remember
        self._recall = recall
        #: mask the run's secrets in a text (every text a reporter sends out passes it)
        self.redact = redact
        #: this process's environment (``GITHUB_*`` under Actions)
        self.env = env
        #: the CI job reporting this move (the Actions run, under Actions), or ``None``
        self.job_url = job_url
        #: one line for the run's warnings or the sweep's notes
        self.warn = warn

    async def remember(self, key: str, values: Mapping[str, str], note: str | None = None) -> None:
        """Keep ``values`` under ``key`` in the run's record, durably, before this returns
        (an append: no lease, whatever the run's status). ``note`` is the line ``zuke runs
        show`` prints for it. Secrets are masked."""
        await self._remember(key, values, note)

    def stored(self) -> RunRecord:
        """The run record as stored now, with everything remembered so far (``report.record``
        may be the running process's view, which a reporter's own appends reach later)."""
        return self._recall()

    def recall(self, key: str, record: RunRecord | None = None) -> Mapping[str, str] | None:
        """What this reporter last remembered under ``key`` (in ``record``, else the record
        as stored now), or ``None``."""
        found = record if record is not None else self._recall()
        tool = f"report:{self._name}"
        for event in reversed(found.events):
            if event.tool == tool and event.args.get("key") == key:
                return {k: v for k, v in event.args.items() if k != "key"}
        return None


class RunReporter(ABC):
    """Told of a run's moves; subclass it and list it in :meth:`Build.reporters`."""

    #: the name its memory is kept under in the record (``report:<name>`` events)
    name: str = "reporter"

    @abstractmethod
    async def report(self, report: RunReport, ctx: ReportContext) -> None:
        """Mirror ``report`` wherever this reporter shows runs. Called in order, one at a
        time per process; what it raises is reported and swallowed (never fails the run),
        and the next sweep reports the run again."""


__all__ = ["ReportContext", "ReportKind", "RunReport", "RunReporter"]
