"""An import made while another module is held back from it: start-up without ``ssl``.

Two start-up paths load code whose ``import ssl`` is optional by design: asyncio's TLS
modules (:mod:`zuke.cli.lean_asyncio`) and psycopg2's C module
(:mod:`zuke.state._pg_driver`). Each saves about 8 ms a command by making that one
import fail while the module loads. The hold is the same in both, so it is written once:
``sys.modules[name] = None`` makes ``import name`` raise ``ImportError``, and the entry
is removed again afterwards unless something replaced it, so a later ``import ssl``
loads the real module as ever.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def held_back(name: str) -> Iterator[None]:
    """``import name`` fails inside the block; afterwards it works as before.

    A module already loaded is not held back: code that has it keeps it.
    """
    if name in sys.modules:
        yield
        return
    sys.modules[name] = None  # type: ignore[assignment]  # `import name` raises ImportError
    try:
        yield
    finally:
        if sys.modules.get(name, 0) is None:
            del sys.modules[name]


__all__ = ["held_back"]
