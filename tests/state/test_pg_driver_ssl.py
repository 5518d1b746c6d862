"""psycopg2 loaded without Python's ``ssl`` (``zuke/state/_pg_driver.py``, issue 28 §2).

psycopg2 imports ``ssl`` only to set OpenSSL's locking callbacks, which OpenSSL
1.1.0 and later do not have; libpq's TLS is its own. The store's first use loads
psycopg2 with that import failing — in a process with one thread only — and a
later ``import ssl`` loads the real module. Each case runs in a fresh interpreter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.psycopg  # psycopg2 itself (the postgres extra), no cluster

STORE_WITHOUT_SSL = """
    import sys
    from zuke.cli import lean_asyncio
    lean_asyncio.install()  # as the console script does first: asyncio without ssl
    import asyncio
    from zuke.state.postgres import PostgresStateStore
    assert "ssl" not in sys.modules
    store = PostgresStateStore(sys.argv[1])
    assert store.list_runs() == []  # connected, the schema made, a statement answered
    assert "psycopg2" in sys.modules
    assert "ssl" not in sys.modules, "psycopg2 imported ssl"
    import ssl  # loaded as ever afterwards
    assert ssl.SSLContext is not None and sys.modules["ssl"] is ssl
    store.close()
    print("ok")
"""

ANOTHER_THREAD = """
    import sys, threading
    from zuke.state import _pg_driver
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        _pg_driver.load()
    finally:
        stop.set()
        other.join()
    # another thread could have imported ssl in the window: nothing was held back
    assert "psycopg2" in sys.modules and "ssl" in sys.modules
    print("ok")
"""


def _run(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_the_store_loads_psycopg2_without_ssl_and_ssl_still_loads_later(pg_url: str) -> None:
    assert _run(STORE_WITHOUT_SSL, pg_url) == "ok"


def test_nothing_is_held_back_while_another_thread_runs() -> None:
    assert _run(ANOTHER_THREAD) == "ok"
