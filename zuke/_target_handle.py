"""The handle a build gives for one of its targets (``self.deploy``), on its own.

Gate settings (:mod:`zuke._waits`) take a handle as a disposition and the target builder
(:mod:`zuke._target`) hands them out; both import it from here, so neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A handle to a build's target, by name. Obtained as ``self.<target>``."""

    name: str

    def __str__(self) -> str:
        return self.name
