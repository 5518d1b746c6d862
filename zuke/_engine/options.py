"""``RunOptions``: how to run a build, as the command line, ``execute()``, a resume or a
sweep sets it (its own module so that the driver can name it without importing the
pipeline that uses it)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING

from zuke._clock import SYSTEM_CLOCK, Clock
from zuke._engine.observer import Observer
from zuke._provenance import Actor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass
class RunOptions:
    """How to run a build (what the command line sets)."""

    targets: Sequence[str] = ()
    params: Mapping[str, Sequence[str]] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    skip: Sequence[str] = ()
    parallel: int = 1
    #: ``--actor`` (its source ``local``), or an :class:`~zuke._provenance.Actor` already
    #: resolved with its source (``zuke mcp``'s); ``None``: as the environment names it
    actor: str | Actor | None = None
    observers: Sequence[Observer] = ()
    clock: Clock = SYSTEM_CLOCK
    #: install SIGINT/SIGTERM handlers that cancel the run (the CLI does)
    handle_signals: bool = False
    #: called once with a message when the first signal arrives
    on_interrupt: Callable[[str], None] | None = None
    #: set it (from the loop) to cancel the run, as Ctrl-C does
    cancel: asyncio.Event | None = None
    #: record the run in a state store even if no feature needs one (``--state``)
    state: bool = False
    #: where a problem that does not stop the run is reported (a store that is briefly down)
    on_warning: Callable[[str], None] = lambda message: None
    #: the directory ``.zuke/runs`` is relative to
    cwd: Path | None = None
    #: the event loop runs nothing but this run (``asyncio.run`` of it: the CLI,
    #: ``execute()``), so the run's only work may hold it: a plain sync body runs on the
    #: loop's thread and a local store is written there (see docs/architecture.md, Rules).
    #: Off for a loop shared with other work (``zuke mcp``'s server, a sweeper).
    inline: bool = False
