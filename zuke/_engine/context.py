"""The context a body receives, and the in-memory run state behind it.

Bodies run on worker threads (sync) or on the event loop (async), so
:class:`RunState` guards its maps with a lock. ``ctx.state.set()`` never
blocks: it merges into memory and notifies the state writer, which persists
the change with the target's next transition at the latest — so whatever a
body recorded is durable before any dependent starts.
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from zuke._engine.result import Outcome
from zuke._errors import ZukeError
from zuke._redact import Redactor
from zuke._target import Target
from zuke._text import check_text
from zuke.state.records import ActorSource, Signal

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # frozen dataclasses without compiling six methods each at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


def merge_patch(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """JSON merge patch (RFC 7386): objects merge recursively, ``None`` deletes a key."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            current = out.get(key)
            out[key] = merge_patch(current if isinstance(current, dict) else {}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def clean_patch(patch: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A ``ctx.state.set()`` patch checked to be JSON, with every secret masked."""
    if not isinstance(patch, Mapping):
        raise ZukeError(f"ctx.state.set() takes a dict, got {type(patch).__name__}")
    try:
        json.dumps(patch, allow_nan=False)  # NaN and Infinity are not JSON: no store takes them
    except (TypeError, ValueError) as exc:
        raise ZukeError(f"ctx.state.set(): the value must be JSON-serialisable ({exc})") from None
    # Strings and numbers alike: an .integer().secret() is a number in the patch.
    cleaned: dict[str, Any] = redactor.json(dict(patch))
    return cleaned


class RunState:
    """Statuses, per-target metadata, outcomes and signals of one run, in memory."""

    def __init__(
        self,
        *,
        run_id: str,
        actor: str,
        redactor: Redactor,
        signals: Mapping[str, Signal] | None = None,
        meta: Mapping[str, Mapping[str, Any]] | None = None,
        prior: Mapping[str, Outcome] | None = None,
        redriven: frozenset[str] = frozenset(),
        params: Mapping[str, Any] | None = None,
        actor_source: ActorSource = "local",
        resumed_by: str | None = None,
    ) -> None:
        self.run_id = run_id
        #: the run's parameter values without secrets, and with every secret's value masked
        #: inside the others (what a gate's trigger reads)
        self.params: Mapping[str, Any] = dict(params or {})
        #: who started the run (the record's ``actor``), the same in every process
        self.actor = actor
        #: where the starter's name came from (the record's ``actorSource``)
        self.actor_source: ActorSource = actor_source
        #: this process's actor (a resumer, a sweep); the starter in the first process. It
        #: names this process's lock holders and the events it writes.
        self.resumed_by = resumed_by if resumed_by is not None else actor
        self.redactor = redactor
        self.signals: Mapping[str, Signal] = dict(signals or {})
        self._meta: dict[str, dict[str, Any]] = {k: dict(v) for k, v in (meta or {}).items()}
        self._outcomes: dict[str, Outcome] = dict(prior or {})
        #: ``ctx.environment_url`` (or ``url=``'s callable) by target, checked and redacted
        self._environment_urls: dict[str, str] = {}
        #: targets an earlier process of this run started but did not finish
        self.redriven = redriven
        self._lock = threading.Lock()
        #: called with a target name after its metadata changed (the state writer listens)
        self.on_meta_change: Callable[[str], None] | None = None
        #: set when the run is cancelled or stopped
        self.cancelled = threading.Event()
        self._attempt_events: set[threading.Event] = set()

    def attempt_cancelled(self, ctx: Context) -> threading.Event:
        """``ctx.cancelled`` of an attempt, made when first asked for (most bodies never
        ask: issue 28 §1, an event and two lock round trips a target saved), set at once
        if the run is already cancelled, and not kept once the attempt is over."""
        with self._lock:
            event = ctx._cancelled
            if event is None:
                event = ctx._cancelled = threading.Event()
                if not ctx._attempt_over:
                    self._attempt_events.add(event)
        if self.cancelled.is_set():
            event.set()
        return event

    def end_attempt(self, ctx: Context) -> None:
        """The attempt is over: a later cancellation no longer needs to reach it."""
        with self._lock:
            ctx._attempt_over = True
            if ctx._cancelled is not None:
                self._attempt_events.discard(ctx._cancelled)

    def cancel(self) -> None:
        """Tell every running body that the run is cancelled."""
        self.cancelled.set()
        with self._lock:
            events = list(self._attempt_events)
        for event in events:
            event.set()

    def meta(self, target: str) -> dict[str, Any]:
        with self._lock:
            found = self._meta.get(target)
            # most targets never set any: a fresh dict, without deepcopy's memo machinery
            return copy.deepcopy(found) if found else {}

    def patch_meta(self, target: str, patch: Mapping[str, Any]) -> None:
        clean = clean_patch(patch, self.redactor)
        with self._lock:
            self._meta[target] = merge_patch(self._meta.get(target, {}), clean)
        if self.on_meta_change is not None:
            self.on_meta_change(target)

    def set_environment_url(self, target: str, url: object, *, recorded: bool = False) -> None:
        """Set the URL of ``target``'s environment (refused in one line if it is not an
        absolute http(s) URL); the state writer records it with the next write (unless it
        is already ``recorded``: ``url=``'s string, on the ``running`` row)."""
        from zuke._environment import url_problem
        from zuke._errors import UsageError

        problem = url_problem(url)
        if problem is not None:
            raise UsageError(f"zuke: target {target!r}: {problem}")
        with self._lock:
            self._environment_urls[target] = self.redactor.text(str(url))
        if self.on_meta_change is not None and not recorded:
            self.on_meta_change(target)

    def environment_url(self, target: str) -> str | None:
        """What :meth:`set_environment_url` set for ``target`` in this process."""
        with self._lock:
            return self._environment_urls.get(target)

    def settle(self, target: str, outcome: Outcome) -> None:
        with self._lock:
            self._outcomes[target] = outcome

    def outcome(self, target: str) -> Outcome | None:
        with self._lock:
            found = self._outcomes.get(target)
        if found is None or found.status in ("pending", "running", "waiting"):
            return None
        return found


class StateHandle:
    """``ctx.state``: a target's durable metadata."""

    def __init__(self, run: RunState, target: str) -> None:
        self._run = run
        self._target = target

    def get(self) -> dict[str, Any]:
        """A copy of the metadata."""
        return self._run.meta(self._target)

    def set(self, patch: Mapping[str, Any]) -> None:
        """Merge ``patch`` into the metadata (JSON merge: ``None`` removes a key); text that is
        not text (a lone surrogate) is refused, and nothing of ``patch`` is kept."""
        check_text(dict(patch), what=f"ctx.state.set in {self._target}")
        self._run.patch_meta(self._target, patch)


@dataclass(frozen=True)
class LockInfo:
    """The lock a target holds while its body runs."""

    key: str
    fence: int


class Context:
    """What a body receives as ``ctx``."""

    def __init__(
        self,
        run: RunState,
        target: str,
        lock: LockInfo | None = None,
        cancelled: threading.Event | None = None,
        *,
        attempt: bool = False,
    ) -> None:
        self._run = run
        self.run_id = run.run_id
        self.target = target
        #: who started the run, the same in every process that continues it
        self.actor = run.actor
        #: this process's actor (a resumer, a sweep): the starter in the first process
        self.resumed_by = run.resumed_by
        self.state = StateHandle(run, target)
        self.signals: Mapping[str, Signal] = run.signals
        #: ``cancelled``: the run's event, or given, or (an attempt's) made when first asked
        self._cancelled = cancelled or (None if attempt else run.cancelled)
        self._attempt_over = False
        self.lock = lock
        #: True when an earlier process of this run already started this target (it was
        #: killed, and the run resumed): the body may be repeating work
        self.redriven = target in run.redriven

    @property
    def cancelled(self) -> threading.Event:
        """Set when the run is cancelled or this attempt timed out; a long synchronous body
        should check ``ctx.cancelled.is_set()`` and return."""
        event = self._cancelled
        return event if event is not None else self._run.attempt_cancelled(self)

    @property
    def environment_url(self) -> str | None:
        """The URL of the environment this target deploys to, as set in this process."""
        return self._run.environment_url(self.target)

    @environment_url.setter
    def environment_url(self, url: str) -> None:
        """Set it once the body knows it (``ctx.environment_url = preview.url``): recorded on
        the target's row, shown with the run, and on GitHub's deployment status."""
        self._run.set_environment_url(self.target, url)

    def state_of(self, target: str | Target) -> StateHandle:
        """Another target's metadata (read what an earlier target recorded)."""
        return StateHandle(self._run, target.name if isinstance(target, Target) else str(target))

    def outcome_of(self, target: str | Target) -> Outcome | None:
        """How a target ended, or ``None`` if it has not settled."""
        return self._run.outcome(target.name if isinstance(target, Target) else str(target))

    def attempt_done(self) -> None:
        """The attempt is over: a later cancellation no longer needs to reach it."""
        self._run.end_attempt(self)

    def for_attempt(self) -> Context:
        """A copy for one attempt of the body, with its own cancellation event (made when
        the body, a timeout or a cancellation first asks for it)."""
        return Context(self._run, self.target, self.lock, attempt=True)

    def __repr__(self) -> str:
        return f"Context(run_id={self.run_id!r}, target={self.target!r})"
