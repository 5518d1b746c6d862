"""Which store a run uses: the one place that reads the state configuration.

First match wins:

1. the build's ``state_store()`` override;
2. ``ZUKE_STATE_URL`` (+ ``ZUKE_STATE_TOKEN``): the HTTP store;
3. ``ZUKE_STATE_DIR``: a filesystem store there;
4. ``ZUKE_STATE=scheme://...``: ``postgresql://`` and ``postgres://`` are the
   Postgres store (:mod:`zuke.state.postgres`, the ``zuke[postgres]`` extra:
   psycopg2); any other scheme is a store registered under the ``zuke.state_stores``
   entry point (``github://`` comes from ``zuke_gh``), so the core never
   imports an integration;
5. ``.zuke/runs`` when asked for (``--state``), or when a feature needs it
   (locks, gates, effects) — ``required=True``.

``ZUKE_STATE=off`` names no store: a run that needs one is refused
(:func:`zuke._engine.durable_open.open_run`).

A setting that names no usable store (``ZUKE_STATE=bogus``, a scheme no package provides,
a URL the store refuses, ``ZUKE_STATE_FSYNC=sometimes``, ``ZUKE_PG_POOL_SIZE=lots``) is a
:class:`~zuke._errors.StoreSettingError`: a usage error, exit 2. So is a ``ZUKE_STATE_DIR``
that does not exist when a command only reads it (``reading``): "no runs found" there would
hide a typo.

Empty environment values count as unset. Heavy modules (httpx, psycopg) are
imported only when their store is chosen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from zuke._errors import StateError, StoreSettingError, StoreUnavailableError

if TYPE_CHECKING:
    from zuke.state._protocol import StateStore

DEFAULT_DIRECTORY = Path(".zuke") / "runs"


def configured_store(
    env: Mapping[str, str], *, cwd: Path | None = None, reading: bool = False
) -> StateStore | None:
    """The store the environment names, or ``None`` if it names none; a setting that names
    no usable store is a :class:`StoreSettingError` (``reading``: a ``ZUKE_STATE_DIR`` that
    does not exist is one too)."""
    try:
        return _configured(env, cwd, reading)
    except (StoreSettingError, StoreUnavailableError):
        raise
    except StateError as exc:  # raised while the store is made from its setting: the setting's
        raise StoreSettingError(str(exc)) from exc


def _configured(env: Mapping[str, str], cwd: Path | None, reading: bool) -> StateStore | None:
    url = env.get("ZUKE_STATE_URL", "")
    if url:
        from zuke.state.http import HttpStateStore, check_url_is_secure

        check_url_is_secure(url, env)
        return HttpStateStore(url, token=env.get("ZUKE_STATE_TOKEN") or None)
    directory = env.get("ZUKE_STATE_DIR", "")
    if directory:
        from zuke.state.filesystem import FileSystemStateStore

        path = Path(cwd or Path.cwd()) / directory
        if reading and not path.is_dir():
            raise StoreSettingError(_missing(directory, path))
        return FileSystemStateStore(path, sync_appends=_sync_appends(env))
    spec = env.get("ZUKE_STATE", "")
    if spec == "off":  # no store at all; a run whose features need one is refused
        return None
    if spec:
        return _from_entry_point(spec, env)
    return None


def resolve_store(
    *,
    override: StateStore | None,
    env: Mapping[str, str],
    required: bool,
    cwd: Path | None = None,
    reading: bool = False,
) -> StateStore | None:
    """The store for a run, or ``None`` when state is neither configured nor required
    (``reading``: for a command that only reads it, see :func:`configured_store`)."""
    if override is not None:
        return override
    store = configured_store(env, cwd=cwd, reading=reading)
    if store is not None or not required:
        return store
    from zuke.state.filesystem import FileSystemStateStore

    return FileSystemStateStore(
        Path(cwd or Path.cwd()) / DEFAULT_DIRECTORY, sync_appends=_sync_appends(env)
    )


def _missing(directory: str, path: Path) -> str:
    what = "is not a directory" if path.exists() else "does not exist"
    where = (
        ""
        if Path(directory).is_absolute()
        else f" (a relative path is read beside the build file: {path})"
    )
    return (
        f"ZUKE_STATE_DIR={directory}: the store's directory {what}{where}; no run was "
        "recorded there. Check the path, or unset ZUKE_STATE_DIR for .zuke/runs"
    )


def _sync_appends(env: Mapping[str, str]) -> bool:
    """``ZUKE_STATE_FSYNC=always`` fsyncs every journal append, not just checkpoints."""
    mode = env.get("ZUKE_STATE_FSYNC", "")
    if mode not in ("", "always", "checkpoints"):
        raise StoreSettingError(f"ZUKE_STATE_FSYNC={mode!r}: expected 'always' or 'checkpoints'")
    return mode == "always"


def _check_parses(spec: str) -> None:
    """A ``postgresql://`` URL whose host or port does not parse: said now, never quoting the
    URL (it may hold the password), rather than at the first connection."""
    from urllib.parse import urlsplit

    try:
        _ = urlsplit(spec).port
    except ValueError:
        raise StoreSettingError(
            "ZUKE_STATE: the postgresql:// URL does not parse (its host or port); write it as "
            "postgresql://USER@HOST:PORT/DB"
        ) from None


def _from_entry_point(spec: str, env: Mapping[str, str]) -> StateStore:
    scheme, sep, _ = spec.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        _check_parses(spec)
        from zuke.state.postgres import from_url

        return from_url(spec, env)
    if not sep or not scheme:
        raise StateError(
            f"ZUKE_STATE={spec!r} is not a store URL; expected e.g. "
            "github://OWNER/REPO?branch=zuke-state"
        )
    if scheme in ("http", "https"):  # the HTTP store has its own variable (and a token)
        raise StateError(
            f"ZUKE_STATE={scheme}://… names no store: the HTTP state service is set with "
            f"ZUKE_STATE_URL={scheme}://… (and ZUKE_STATE_TOKEN); ZUKE_STATE takes "
            "postgresql://… or a store package's scheme such as github://"
        )
    from importlib.metadata import entry_points  # ~12 ms: only when a scheme is named

    found = [ep for ep in entry_points(group="zuke.state_stores") if ep.name == scheme]
    if not found:
        raise StateError(
            f"ZUKE_STATE uses the scheme {scheme!r}, but no installed package provides it "
            "(github:// comes with zuke_gh)"
        )
    factory = cast(Callable[..., Any], found[0].load())
    return cast("StateStore", factory(spec, env))
