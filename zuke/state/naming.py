"""A store's name in messages: what a person reads and can act on, never a Python repr.

Each of zuke's stores says it with a ``display_name``: a directory, ``postgresql://USER@HOST:
PORT/DB`` (never the password), ``github://OWNER/REPO@BRANCH``, the state service's URL
without credentials. A third-party store without one is named by its class: its ``repr``
could show a password or a token.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from zuke.state._protocol import StateStore


def store_name(store: StateStore) -> str:
    """How a message names ``store``."""
    name = getattr(store, "display_name", None)
    if isinstance(name, str) and name:
        return name
    directory = getattr(store, "directory", None)
    if isinstance(directory, str | Path):
        return str(directory)
    return type(store).__name__


__all__ = ["store_name"]
