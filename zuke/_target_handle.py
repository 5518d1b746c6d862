"""The handle a build gives for one of its targets (``self.deploy``), on its own.

Gate settings (:mod:`zuke._waits`) take a handle as a disposition and the target builder
(:mod:`zuke._target`) hands them out; both import it from here, so neither imports the other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # frozen dataclasses without compiling six methods each at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass(frozen=True)
class Target:
    """A handle to a build's target, by name. Obtained as ``self.<target>``."""

    name: str

    def __str__(self) -> str:
        return self.name
