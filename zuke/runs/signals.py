"""Delivering a signal: a durable append to the run, whoever holds it.

A signal is stored whatever the run is doing — suspended, or running another
branch with its gate already waiting — and whoever holds the run's lease, in
one compare-and-swap that touches nothing but ``signals`` (and an audit
event). Resuming is a separate step (:mod:`zuke.runs.resume`): whoever holds
the lease next, or the next sweep, consumes every stored signal. So three
approvals delivered at the same moment are all stored, and the run resumes
once.

Refused, and not stored (each says why):

* a name no gate of the run waits for (a typo: ``release-aproved``), naming
  the signals its gates do wait for — a signal for a gate not reached yet is
  fine;
* a run that ended (or is being cancelled), or whose gate for this signal
  timed out;
* data that is not JSON, too large or too deep.

One delivery has one answer: the same signal delivered twice (same id) is
``already`` the second time, and both are successes. The first delivery of a
name stands: a later one with other data is answered ``superseded`` (exit 0:
the gate it meant to open is open) and its data is not stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal

from zuke._clock import Clock, iso
from zuke._engine.run import LoadedBuild
from zuke._errors import RunNotSuspendedError, SignalRefusedError, UnknownSignalError, ZukeError
from zuke._jsondepth import check_json_depth
from zuke._redact import Redactor
from zuke._text import check_text
from zuke.state._protocol import StateStore, StoredRun
from zuke.state.records import TERMINAL_STATUSES, RunDelta, RunEvent, RunRecord, Signal
from zuke.state.update import GaveUp, Unchanged, update_run

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

#: The largest signal payload, as JSON text (UTF-8 bytes).
MAX_SIGNAL_BYTES = 64 * 1024


@dataclass(frozen=True)
class SignalDelivery:
    """A signal to deliver with a resume."""

    name: str
    data: Any = None
    #: the idempotency key; by default a hash of the name and the data
    id: str | None = None

    def key(self, redactor: Redactor | None = None) -> str:
        """The idempotency key. The default is hashed from the data as it is stored —
        secrets masked — so the stored key cannot confirm a guess at a secret."""
        if self.id:
            return self.id
        data = self.data if redactor is None else redact_data(self.data, redactor)
        text = json.dumps([self.name, data], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def check_signal(delivery: SignalDelivery) -> None:
    """A signal's name and payload must be something the record can hold."""
    if not delivery.name.strip():
        raise SignalRefusedError("resume: --signal needs a name")
    check_json_depth(delivery.data, what="resume: the signal's data", error=SignalRefusedError)
    check_text(delivery.data, what="resume: the signal's data", error=SignalRefusedError)
    try:
        text = json.dumps(delivery.data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise SignalRefusedError(f"resume: the signal's data is not JSON ({exc})") from None
    if len(text.encode()) > MAX_SIGNAL_BYTES:
        raise SignalRefusedError(
            f"resume: the signal's data is {len(text.encode())} bytes; the limit is "
            f"{MAX_SIGNAL_BYTES} (64 KiB). Send a reference (a URL, an id) instead"
        )


def redact_data(data: Any, redactor: Redactor) -> Any:
    """The payload as it may be stored: every secret value of the run masked."""
    return redactor.json(data)


async def waited_signals(loaded: LoadedBuild, record: RunRecord) -> set[str] | None:
    """The signal names the run's gates wait for (``None``: a gate may read any signal).

    Gates inside fan-out items count when the items can be read now; a fan-out that
    cannot be materialised makes the answer ``None`` (nothing is refused on a guess).
    """
    names: set[str] = set()
    rows: Iterable[str] = [*(n.name for n in record.graph), *record.targets]
    for name in dict.fromkeys(rows):
        try:
            spec = await loaded.index.get(name)
        except ZukeError:
            return None
        if spec is None:
            continue
        if spec.fan_out is not None and not any(t.startswith(f"{name}[") for t in record.targets):
            return None  # its items' gates are not known yet: accept any name
        if spec.wait is None:
            continue
        wanted = spec.wait.trigger.signal_name()
        if wanted is None:
            return None
        names.add(wanted)
    return names


def refuse_unknown(record: RunRecord, name: str, wanted: set[str] | None) -> None:
    """A signal no gate of the run waits for is a typo until proven otherwise (exit 2)."""
    if wanted is None or name in wanted:
        return
    listed = ", ".join(repr(w) for w in sorted(wanted)) or "none (the run has no signal gate)"
    raise UnknownSignalError(
        f"resume: run {record.id} has no gate waiting for the signal {name!r}; its gates wait "
        f"for {listed}. Check the name; nothing was delivered",
        run_id=record.id,
    )


#: ``already``: this very delivery (same id) was stored before; ``superseded``: another
#: delivery of the same signal was, and it stands
DeliveryAction = Literal["stored", "already", "superseded"]


async def store_signal(
    store: StateStore,
    record: RunRecord,
    delivery: SignalDelivery,
    *,
    redactor: Redactor,
    actor: str,
    clock: Clock,
    known: StoredRun | None = None,
) -> tuple[DeliveryAction, RunRecord]:
    """Append the signal to the run (no lease needed: an append moves nothing).

    Returns whether it was stored now, was already there, or another delivery of the
    same name was stored first (the first one stands: a gate reads one value), and the
    record after. ``known``: the run as the caller has just read it — the first attempt
    is decided on it, not on a second read (a compare-and-swap on its version: if the run
    moved meanwhile, the append conflicts and is decided again on a fresh read).
    """
    key = delivery.key(redactor)
    data = redact_data(delivery.data, redactor)

    def append(fresh: RunRecord) -> RunDelta | None:
        if delivery.name in fresh.signals:
            return None  # the first delivery of a name is the one the gate reads
        if fresh.status in TERMINAL_STATUSES or fresh.status == "cancelling":
            raise RunNotSuspendedError(
                f'resume: run {fresh.id} is "{fresh.status}"; the signal {delivery.name!r} '
                "was not delivered",
                run_id=fresh.id,
                status=fresh.status,
            )
        stamp = iso(clock.now_ms())
        event = RunEvent(at=stamp, tool="signal", actor=actor,
                         args={"signal": delivery.name, "signalId": key})  # fmt: skip
        # updatedAt is kept: a signal is an append, not a move of the run
        return RunDelta(
            updated_at=fresh.updated_at,
            signals={delivery.name: Signal(data=data, received_at=stamp, id=key)},
            events=(event,),
        )

    outcome = await asyncio.to_thread(update_run, store, record.id, append, known=known)
    if isinstance(outcome, GaveUp):
        raise SignalRefusedError(
            f"resume: run {record.id} kept changing while the signal was stored; try again",
            run_id=record.id,
        )
    if not isinstance(outcome, Unchanged):
        return "stored", outcome.record
    same = outcome.record.signals[delivery.name].id == key
    return ("already" if same else "superseded"), outcome.record


def due_signals(record: RunRecord) -> list[str]:
    """Waiting gates whose signal is stored: a resume passes them (none: nothing is due)."""
    due = []
    for name, row in record.targets.items():
        waiting = row.waiting_for
        if row.status == "waiting" and waiting is not None:
            wanted = waiting.trigger.removeprefix("signal:")
            if waiting.trigger.startswith("signal:") and wanted in record.signals:
                due.append(name)
    return due


__all__ = [
    "MAX_SIGNAL_BYTES",
    "SignalDelivery",
    "check_signal",
    "due_signals",
    "redact_data",
    "refuse_unknown",
    "store_signal",
    "waited_signals",
]
