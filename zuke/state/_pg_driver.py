"""psycopg2, the one Postgres driver, loaded without Python's ``ssl`` (issue 28 §2, §3).

psycopg2's C module imports ``ssl`` as it starts (``libcrypto_threads_init``), so
that Python installs OpenSSL's locking callbacks before libpq would, and then tells
libpq not to (``PQinitOpenSSL(1, 0)``). Those callbacks exist only in OpenSSL before
1.1.0: the Pythons zuke runs on need 1.1.1 or later, and psycopg2-binary's libpq carries
an OpenSSL 3 of its own besides. Where that import fails, psycopg2 goes on by design
("Python compiled without OpenSSL": it clears the error) and libpq sets up its own
library — the same TLS to the server (``sslmode`` is libpq's).

Now that asyncio no longer brings ``ssl`` (:mod:`zuke.cli.lean_asyncio`), that import
was psycopg2's alone: about 8 ms of every Postgres command's start (``ssl``, ``_ssl``,
``base64``, ``struct``), quiet. :func:`load` makes it fail while psycopg2 loads, and
only then: a later ``import ssl`` (httpx, a build body's own) loads the module as ever.
It holds ``ssl`` back only in a process with one thread: another thread's ``import
ssl`` in that window would fail too.
"""

from __future__ import annotations

import sys
import threading
from contextlib import nullcontext
from types import ModuleType

from zuke._held_back import held_back


def load() -> ModuleType:
    """``psycopg2``, imported now if it is not yet (``ImportError``: it is not installed)."""
    loaded = sys.modules.get("psycopg2")
    if loaded is not None:
        return loaded
    with held_back("ssl") if threading.active_count() == 1 else nullcontext():
        import psycopg2  # its `import ssl` fails under the hold
    return psycopg2


__all__ = ["load"]
