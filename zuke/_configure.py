"""Running a builder's ``configure(settings)`` function when the build loads.

``waits_for(configure)`` and ``for_each(..., configure)`` take a function of
their settings object; it runs once, at load, so a bad setting fails the load
with a definition error naming the target — never the run, halfway.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from zuke._errors import BuildDefinitionError

S = TypeVar("S")


def configured(settings: S, configure: Callable[[S], Any], where: str) -> S:
    """``configure(settings)``; anything it raises becomes a :class:`BuildDefinitionError`
    starting with ``where`` (``gate 'approve': its waits_for() settings``)."""
    try:
        configure(settings)
    except BuildDefinitionError:
        raise
    except Exception as exc:
        raise BuildDefinitionError(f"{where} raised: {exc}") from exc
    return settings
