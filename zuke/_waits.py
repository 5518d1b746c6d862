"""Gates: ``waits_for(configure)``, the built-in triggers, and the public trigger seam.

A gate is a bodyless target that waits for a :class:`WaitTrigger`. Reached in
the graph, it asks the trigger; a satisfied trigger lets dependents run in
the same process, otherwise the gate is recorded ``waiting`` and the run
suspends. Later a ``zuke resume`` (a signal) or a ``zuke resume --check``
sweep, possibly in another process, asks again.

The seam is what ``external_signal``, ``resume_when`` and
``zuke_gh.github_workflow`` are built on, and what users implement for their
own triggers. A trigger is asked through :meth:`WaitTrigger.check` with a
:class:`WaitContext` and answers :class:`NotYet`, :class:`Satisfied` or
:class:`WaitFailed`. It may keep state of its own in the gate's durable
state (``ctx.state``) and make it durable *before* an external call with
``await ctx.persist()`` — so a process killed right after the call finds,
on the next check, that the call was made (and never makes it twice).

A trigger must not assume it runs in the process that first reached the
gate: a sweep in a fresh process, which never ran the build before, checks
it from the record alone.
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from zuke._clock import parse_iso
from zuke._configure import configured
from zuke._duration import Duration, parse_duration
from zuke._errors import BuildDefinitionError
from zuke._target_handle import Target

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

if TYPE_CHECKING:
    from zuke.state.records import Signal

TimeoutDisposition = Literal["fail", "cancel-run"]
#: where a run's starter came from (:attr:`WaitContext.actor_source`)
ActorSource = Literal["github", "local"]


def _unchanged(text: str) -> str:
    return text


@dataclass(frozen=True)
class NotYet:
    """The trigger is not satisfied yet; ``reason`` is shown by ``runs show`` and the sweep."""

    reason: str | None = None


@dataclass(frozen=True)
class Satisfied:
    """The trigger is satisfied; dependents run. ``payload`` is for the trigger's own use;
    ``audit`` is one line for the run's audit trail (who or what satisfied it), recorded
    redacted with the gate's name when a sweep passes the gate."""

    payload: Any = None
    audit: str | None = None


@dataclass(frozen=True)
class WaitFailed:
    """The wait cannot succeed (a failed dispatch, a run that will never appear): the gate fails."""

    reason: str


WaitResult = NotYet | Satisfied | WaitFailed


class GateState:
    """``ctx.state`` of a gate: its durable metadata, as ``ctx.state`` is for a body."""

    def __init__(
        self, read: Callable[[], dict[str, Any]], write: Callable[[Mapping[str, Any]], None]
    ) -> None:
        self._read = read
        self._write = write

    def get(self) -> dict[str, Any]:
        """A copy of the gate's metadata."""
        return self._read()

    def set(self, patch: Mapping[str, Any]) -> None:
        """Merge ``patch`` in (JSON merge: ``None`` removes a key); durable at the next
        :meth:`WaitContext.persist` at the latest."""
        self._write(patch)


class WaitContext:
    """What a trigger sees when it is checked."""

    def __init__(
        self,
        *,
        run_id: str,
        target: str,
        params: Mapping[str, Any],
        signals: Mapping[str, Signal],
        state: GateState,
        now_ms: int,
        deadline_ms: int | None,
        persist: Callable[[], Awaitable[None]],
        shared: dict[str, Any] | None = None,
        first_check: bool = False,
        actor: str | None = None,
        actor_source: ActorSource = "local",
        resumed_by: str | None = None,
        redact: Callable[[str], str] | None = None,
    ) -> None:
        self.run_id = run_id
        #: who started the run: the record's ``actor``, written once by the first process and
        #: the same in every later one (a resumer, a sweep, a comment sweep)
        self.actor = actor
        #: where the starter's name came from: ``"github"`` (a GitHub login, from
        #: ``GITHUB_TRIGGERING_ACTOR`` / ``GITHUB_ACTOR`` under GitHub Actions) or ``"local"``
        #: (``--actor``, ``ZUKE_ACTOR``, the OS user: a name GitHub never vouched for)
        self.actor_source: ActorSource = actor_source
        #: the actor of the process checking the gate now (a resumer, a sweep)
        self.resumed_by = resumed_by
        #: the run's secret redactor: every text a trigger sends out (an issue body, a title,
        #: a comment) goes through it, so a secret's value inside another value (a URL with a
        #: token in it) and its common encodings are masked
        self.redact: Callable[[str], str] = redact if redact is not None else _unchanged
        #: the gate's name
        self.target = target
        #: the run's parameter values by name: secret parameters left out, and a secret's
        #: value inside any other value masked (``https://deploy:[redacted]@host``)
        self.params = params
        self.signals = signals
        self.state = state
        #: the store-side "now" this check is judged at (epoch ms)
        self.now_ms = now_ms
        #: when the gate times out (epoch ms), or ``None``
        self.deadline_ms = deadline_ms
        #: set (to the deadline) when this is the gate's final check, past its deadline: a
        #: trigger with ``answers_as_of`` counts only what happened at or before it (an
        #: answer given in time is not lost to a sweep that came late)
        self.as_of_ms: int | None = (
            deadline_ms if deadline_ms is not None and now_ms >= deadline_ms else None
        )
        #: a dict shared by every check of one sweep: a trigger may memoise a remote
        #: answer there (one poll per workflow, however many gates wait on it)
        self.shared: dict[str, Any] = {} if shared is None else shared
        #: True the first time the gate is reached, False on later checks
        self.first_check = first_check
        self._persist = persist

    async def persist(self) -> None:
        """Make what was ``state.set()`` so far durable before going on (an external call).

        It raises when the write did not land, or landed for a run that is no longer this
        process's (taken over, settled elsewhere): then do not make the call.
        """
        await self._persist()


class WaitTrigger(ABC):
    """What a gate waits for. Subclass it for a trigger of your own."""

    #: the least time between two checks (ms); ``None``: every check asks
    interval_ms: int | None = None
    #: whether ``check`` honours ``ctx.as_of_ms``: only such a trigger is asked once more
    #: past its deadline (what it says happened by then decides); any other times out
    answers_as_of: bool = False

    @property
    @abstractmethod
    def descriptor(self) -> str:
        """A short label recorded as ``waitingFor.trigger`` (``signal:approved``)."""

    @abstractmethod
    def check(self, ctx: WaitContext) -> WaitResult | bool | Awaitable[WaitResult | bool]:
        """Is the wait over? ``True``/``False`` mean :class:`Satisfied`/:class:`NotYet`."""

    def signal_name(self) -> str | None:
        """The signal that satisfies this trigger, if it is a signal (for guidance)."""
        return None

    async def on_timeout(self, ctx: WaitContext) -> None:  # noqa: B027 (optional: default no-op)
        """Called once when the gate times out, under the run's lease, before its disposition
        runs (``zuke_gh`` cancels the dispatched workflow run here). ``ctx.state`` reads the
        gate's state; what it writes is not kept. A hook that raises is reported as a note of
        the timeout, and the disposition runs regardless. The default does nothing."""

    async def on_cancel(self, ctx: WaitContext) -> str | None:
        """Called once when the run is cancelled while this gate waits (``zuke cancel``), under
        the run's lease, before the compensations run (``zuke_gh``'s ``github_workflow`` cancels
        the workflow run it dispatched here). It answers one line for the run's events (what it
        did), or ``None``. A hook that raises is reported as a note of the cancel, and the
        cancel goes on regardless. The default does nothing."""
        return None

    def batch_key(self) -> Hashable | None:
        """Gates whose triggers answer the same non-``None`` key are offered to
        :meth:`prefetch` together, once a sweep; ``None`` (the default): never batched."""
        return None

    async def prefetch(self, gates: Sequence[WaitContext]) -> None:  # noqa: B027 (optional)
        """Read, once before a sweep checks them, what every gate of ``gates`` (all of this
        sweep's waiting gates whose trigger has this one's :meth:`batch_key`, this trigger's
        own among them) will need, and memoise it in ``ctx.shared`` (one request for a hundred
        gates instead of one each). Reads only: ``ctx.persist()`` refuses here. An exception is
        reported and each gate is then checked on its own, as usual. The default does
        nothing."""


async def ask(trigger: WaitTrigger, ctx: WaitContext) -> WaitResult:
    """Check ``trigger`` (sync or async) and normalise its answer (one that is not a result
    fails the wait). Past the deadline, a trigger that cannot answer as of it is not asked."""
    if ctx.as_of_ms is not None and not trigger.answers_as_of:
        return NotYet(f"past its deadline: {trigger.descriptor} cannot say what happened by then")
    answer: Any = trigger.check(ctx)  # a user's trigger may answer anything
    if inspect.isawaitable(answer):
        answer = await answer
    if answer is True:
        return Satisfied()
    if answer is False or answer is None:
        return NotYet()
    if isinstance(answer, (NotYet, Satisfied, WaitFailed)):
        return answer
    # A trigger that answers something else is broken, not slow: asking again cannot help.
    return WaitFailed(
        f"gate {ctx.target!r}: trigger {trigger.descriptor!r} answered {answer!r}; "
        "return NotYet(), Satisfied(), WaitFailed(reason) or a bool"
    )


class _ExternalSignal(WaitTrigger):
    answers_as_of = True  # a signal's arrival is recorded (receivedAt)

    def __init__(self, name: str) -> None:
        self.name = name

    @property
    def descriptor(self) -> str:
        return f"signal:{self.name}"

    def signal_name(self) -> str | None:
        return self.name

    def check(self, ctx: WaitContext) -> WaitResult:
        signal = ctx.signals.get(self.name)
        if signal is None:
            return NotYet(f"waiting for the signal {self.name!r}")
        received = parse_iso(signal.received_at)
        if ctx.as_of_ms is not None and (received is None or received > ctx.as_of_ms):
            return NotYet(f"the signal {self.name!r} came after the gate's deadline")
        return Satisfied(signal)


def external_signal(name: str) -> WaitTrigger:
    """Satisfied once the named signal is delivered (``zuke resume RUN --signal NAME``)."""
    if not isinstance(name, str) or not name.strip():
        raise BuildDefinitionError(f"external_signal() needs a signal name, got {name!r}")
    return _ExternalSignal(name.strip())


class _ResumeWhen(WaitTrigger):
    def __init__(self, predicate: Callable[[], Any], interval_ms: int | None) -> None:
        self.predicate = predicate
        self.interval_ms = interval_ms

    @property
    def descriptor(self) -> str:
        return "predicate"

    async def check(self, ctx: WaitContext) -> WaitResult:
        answer = self.predicate()
        if inspect.isawaitable(answer):
            answer = await answer
        return Satisfied() if answer else NotYet("the predicate is not true yet")


def resume_when(check: Callable[[], Any], interval: Duration | None = None) -> WaitTrigger:
    """Satisfied once ``check()`` (sync or async) returns true.

    Never polled by itself: each ``zuke resume --check`` asks again, but not
    sooner than ``interval`` after the last time it asked.
    """
    if not callable(check):
        raise BuildDefinitionError(f"resume_when() needs a callable, got {check!r}")
    interval_ms = (
        None if interval is None else parse_duration(interval, what="resume_when interval")
    )
    return _ResumeWhen(check, interval_ms)


@dataclass(frozen=True)
class WaitSpec:
    """A gate's frozen settings."""

    trigger: WaitTrigger
    timeout_ms: int | None = None
    on_timeout: str = "fail"  #: "fail", "cancel-run", or a target's name
    on_timeout_is_target: bool = False
    #: what a trigger's ``WaitFailed`` (a ``/deny``, a failed workflow) does: the same forms
    on_failure: str = "fail"
    on_failure_is_target: bool = False


class WaitSettings:
    """What ``waits_for(configure)`` receives: ``s.on(trigger).timeout("72h").on_timeout(...)``."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._trigger: WaitTrigger | None = None
        self._timeout_ms: int | None = None
        self._on_timeout: str = "fail"
        self._is_target = False
        self._on_failure: tuple[str, bool] = ("fail", False)

    def on(self, trigger: WaitTrigger) -> WaitSettings:
        """The trigger the gate waits for."""
        if not isinstance(trigger, WaitTrigger):
            raise BuildDefinitionError(
                f"gate {self._target!r}: on() takes a trigger (external_signal(), resume_when(), "
                f"or a WaitTrigger), got {trigger!r}"
            )
        self._trigger = trigger
        return self

    def timeout(self, duration: Duration) -> WaitSettings:
        """How long the gate may stay waiting, from when it first suspends."""
        self._timeout_ms = parse_duration(duration, what=f"gate {self._target!r} timeout()")
        return self

    def on_timeout(self, disposition: TimeoutDisposition | Target) -> WaitSettings:
        """``"fail"`` (default), ``"cancel-run"``, or a target to run instead (a rollback)."""
        self._on_timeout, self._is_target = self._disposition("on_timeout", disposition)
        return self

    def on_failure(self, disposition: TimeoutDisposition | Target) -> WaitSettings:
        """What the gate does when its trigger fails (``WaitFailed``: a ``/deny``, a failed
        workflow): ``"fail"`` (default), ``"cancel-run"``, or a target to run instead."""
        self._on_failure = self._disposition("on_failure", disposition)
        return self

    def _disposition(self, what: str, disposition: object) -> tuple[str, bool]:
        if isinstance(disposition, Target):
            return disposition.name, True
        if disposition in ("fail", "cancel-run"):
            return str(disposition), False
        raise BuildDefinitionError(
            f'gate {self._target!r}: {what}() takes "fail", "cancel-run" or a target '
            f"handle such as self.rollback, got {disposition!r}"
        )

    def freeze(self) -> WaitSpec:
        if self._trigger is None:
            raise BuildDefinitionError(
                f"gate {self._target!r} sets no trigger: use s.on(external_signal(...)) or "
                "s.on(resume_when(...))"
            )
        failure, failure_is_target = self._on_failure
        return WaitSpec(self._trigger, self._timeout_ms, self._on_timeout, self._is_target,
                        failure, failure_is_target)  # fmt: skip


def freeze_wait(target: str, configure: Callable[[WaitSettings], Any]) -> WaitSpec:
    """Run a gate's ``configure`` and freeze it (at load: a bad setting fails the load)."""
    settings = configured(
        WaitSettings(target), configure, f"gate {target!r}: its waits_for() settings"
    )
    return settings.freeze()
