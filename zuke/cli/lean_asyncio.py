"""asyncio loaded without ``ssl`` until something imports ``ssl``: the command's start-up.

``import asyncio`` imports ``ssl`` (OpenSSL's bindings, ``base64``, ``struct``): about
8 ms of every run's and every ``zuke resume``'s start-up (issue 28 §1, §3), though no
command of zuke speaks TLS through asyncio (psycopg2 has libpq's TLS, the GitHub client
is synchronous httpx, which imports ``ssl`` itself). asyncio does without it: each of its
modules that uses TLS imports it as ``try: import ssl / except ImportError: ssl = None``
(``base_events``, ``selector_events``, ``sslproto``; the same in Python 3.11 to 3.13).

:func:`install` (the console script's first step) makes the first ``import asyncio`` see
``ssl`` as absent (``sys.modules["ssl"] = None`` while asyncio's package runs), then
watches for the first real ``import ssl``: when anything imports it — httpx, uvicorn,
a build body's own ``aiohttp`` — the module loads as ever and asyncio is given it back
(the three modules' ``ssl`` and ``sslproto.SSLAgainErrors``, what their imports would
have set), so TLS through asyncio works as if nothing had been held back. A process
that imported ``ssl`` first (or asyncio) is left alone.
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType
from typing import TYPE_CHECKING, Any

from zuke._held_back import held_back

if TYPE_CHECKING:  # importlib.abc loads importlib.resources: its protocols are duck-typed here
    from importlib.abc import Loader

#: asyncio's modules that import ``ssl`` under ``try``, and set ``ssl = None`` without it
_USERS = ("asyncio.base_events", "asyncio.selector_events", "asyncio.sslproto")

#: the Pythons whose asyncio was read for :data:`_USERS`; on any other the hold is not made
#: (a later asyncio may use ``ssl`` in a module this list does not name)
_KNOWN = ((3, 11), (3, 12), (3, 13))


def give_back(ssl: ModuleType) -> None:
    """Set asyncio's ``ssl`` names as its imports would have, ``ssl`` being there."""
    for name in _USERS:
        module = sys.modules.get(name)
        if module is not None and getattr(module, "ssl", None) is None:
            module.ssl = ssl  # type: ignore[attr-defined]
    sslproto = sys.modules.get("asyncio.sslproto")
    if sslproto is not None and not hasattr(sslproto, "SSLAgainErrors"):
        sslproto.SSLAgainErrors = (ssl.SSLWantReadError, ssl.SSLSyscallError)  # type: ignore[attr-defined]


class _Then:
    """``loader``, then ``after(module)`` once the module ran."""

    def __init__(self, loader: Loader, after: Any) -> None:
        self._loader = loader
        self._after = after

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._after(module, self._loader)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, …: the real loader's
        return getattr(self._loader, name)


def _asyncio_without_ssl(module: ModuleType, loader: Loader) -> None:
    if "ssl" in sys.modules:  # imported meanwhile: nothing to hold back
        loader.exec_module(module)
        return
    with held_back("ssl"):  # asyncio's `import ssl` fails
        loader.exec_module(module)
    sys.meta_path.insert(0, _Finder("ssl", _ssl_then_give_back))


def _ssl_then_give_back(module: ModuleType, loader: Loader) -> None:
    loader.exec_module(module)
    give_back(module)


class _Finder:
    """Finds ``name`` once (then leaves ``sys.meta_path``) with ``then`` around its loading."""

    def __init__(self, name: str, then: Any) -> None:
        self._name = name
        self._then = then

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != self._name:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Then(spec.loader, self._then)  # type: ignore[assignment]
        return spec


def install() -> None:
    """Hold ``ssl`` back from the first ``import asyncio`` (unless either is loaded)."""
    if sys.version_info[:2] not in _KNOWN or "asyncio" in sys.modules or "ssl" in sys.modules:
        return
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _Finder("asyncio", _asyncio_without_ssl))


__all__ = ["give_back", "install"]
