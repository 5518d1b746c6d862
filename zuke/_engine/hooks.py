"""What the scheduler calls around a target: its guard (a lock), its gate, its effects.

The scheduler knows nothing of stores; :class:`~zuke._engine.durable.DurableRun`
provides these hooks for a recorded run, and a run without a store has none.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal, Protocol

from zuke._engine.context import Context
from zuke._engine.plan import TargetSpec
from zuke.state.records import WaitingFor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # frozen dataclasses without compiling six methods each at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


class Held(Protocol):
    """What a guard holds while a body runs (a lock): lost if the store takes it back."""

    lost: asyncio.Event

    def loss_message(self) -> str: ...

    async def release(self) -> None: ...


#: Runs between a target's ``running`` transition and its body (takes its lock).
TargetGuard = Callable[[TargetSpec, Context], Awaitable[Held | None]]


@dataclass(frozen=True)
class GateVerdict:
    """What checking a gate decided: it passed, it waits (and for what), or it failed."""

    status: Literal["passed", "waiting", "failed"]
    waiting_for: WaitingFor | None = None
    error: str | None = None


#: Checks a gate when it is reached (the durable side: it needs the record).
GateCheck = Callable[[TargetSpec, Context], Awaitable[GateVerdict]]
#: Drives a target's crash-durable effects after its body; raises BodyFailure.
EffectRunner = Callable[[TargetSpec, Context], Awaitable[None]]
