"""asyncio without ``ssl`` until something imports ``ssl`` (zuke/cli/lean_asyncio.py,
issue 28 §1, §3): held back from asyncio's import, then given back to asyncio on the
first ``import ssl``, so TLS through asyncio works as before. Each case in a fresh
interpreter (the hold is about a process's first ``import asyncio``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

#: a TLS connection through asyncio to a local server that closes at once: with ssl the
#: handshake fails on the closed socket; with asyncio's ssl missing, asyncio refuses first
_TLS_ATTEMPT = """
import asyncio, ssl, sys

async def main():
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await asyncio.open_connection("127.0.0.1", port, ssl=ssl.create_default_context())
    except RuntimeError as exc:
        print("refused:", exc)
    except (OSError, ssl.SSLError):
        print("handshake tried")
    finally:
        server.close()

asyncio.run(main())
"""


def _run(prelude: str) -> list[str]:
    code = textwrap.dedent(prelude) + _TLS_ATTEMPT
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_asyncio_loads_without_ssl_and_gets_it_back_on_the_first_import_of_ssl() -> None:
    lines = _run("""
        import sys
        from zuke.cli import lean_asyncio
        lean_asyncio.install()
        import asyncio, asyncio.sslproto
        print("ssl loaded with asyncio:", "ssl" in sys.modules, asyncio.sslproto.ssl)
        import ssl
        print("given back:", all(sys.modules[m].ssl is ssl for m in lean_asyncio._USERS),
              asyncio.sslproto.SSLAgainErrors == (ssl.SSLWantReadError, ssl.SSLSyscallError))
    """)
    assert lines == ["ssl loaded with asyncio: False None", "given back: True True",
                     "handshake tried"]  # fmt: skip


def test_without_the_give_back_asyncio_would_refuse_tls() -> None:
    """What the give-back is for: asyncio imported with ssl absent refuses TLS for good."""
    lines = _run("""
        import sys
        sys.modules["ssl"] = None
        import asyncio
        del sys.modules["ssl"]
    """)
    assert len(lines) == 1 and lines[0].startswith("refused:"), lines


def test_a_process_that_has_ssl_already_is_left_alone() -> None:
    lines = _run("""
        import ssl, sys
        from zuke.cli import lean_asyncio
        lean_asyncio.install()
        import asyncio.sslproto
        print(asyncio.sslproto.ssl is ssl, any("lean_asyncio" in repr(f) for f in sys.meta_path))
    """)
    assert lines == ["True False", "handshake tried"]


def test_a_python_whose_asyncio_was_not_read_is_left_alone() -> None:
    """The hold names asyncio's modules of 3.11 to 3.13; on another Python it is not made."""
    lines = _run("""
        import sys
        from zuke.cli import lean_asyncio
        lean_asyncio._KNOWN = ()
        lean_asyncio.install()
        import asyncio
        print("ssl" in sys.modules)
    """)
    assert lines == ["True", "handshake tried"]
