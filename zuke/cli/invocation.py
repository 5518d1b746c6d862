"""What a management command is about: its build file (found, imported only if asked) and store.

One rule for where the default store lives: a relative store path
(``.zuke/runs``, ``ZUKE_STATE_DIR``) is resolved against the build file's
directory (``--file``, ``ZUKE_FILE``, ``./build.py``), found without importing
the file, else the working directory (:func:`zuke._loader.build_home`).

A command that needs no build (``runs``, ``locks``, ``state init``, the
bookkeeping of ``cancel``) still imports it for its ``state_store()``, but a
build that fails to load does not stop it: the command reads the store the
environment names (or the default) and says so in one line on stderr. A
command that needs the build says so in one line (:func:`needs_build`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from zuke._errors import BuildDefinitionError, RunNotFoundError, UsageError, ZukeError

if TYPE_CHECKING:
    from dataclasses import dataclass

    from zuke._build import Build
    from zuke._redact import Redactor
    from zuke.state._protocol import StateStore
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


def known_secrets(
    build: type[Build] | None, params: Mapping[str, Sequence[str]], env: Mapping[str, str]
) -> list[str]:
    """The build's secrets as this process has them (the command line, the environment), in
    every spelling: what its console lines and the job summary must never show."""
    if build is None:
        return []
    from zuke._build import parameters
    from zuke._params import resolve

    try:
        return resolve(parameters(build), params, env, lenient=True).secrets
    except ZukeError:  # nothing to mask that could not even be read
        return []


def build_redactor(
    build: type[Build] | None, params: Mapping[str, Sequence[str]], env: Mapping[str, str]
) -> Redactor:
    """A redactor of :func:`known_secrets`."""
    from zuke._redact import Redactor

    return Redactor(known_secrets(build, params, env))


def needs_build(problem: ZukeError, command: str, why: str) -> BuildDefinitionError:
    """``loading build.py failed (…); 'zuke resume RUN' needs it to continue the run``."""
    return BuildDefinitionError(f"{problem}; '{command}' needs it {why}")


def naming_store(exc: RunNotFoundError, store: StateStore | None) -> RunNotFoundError:
    """``no run "r9" in the store /abs/.zuke/runs``: a missing run names where it was sought."""
    if store is None or "in the store" not in str(exc):
        return exc
    text = str(exc).replace("in the store", f"in the store {store_where(store)}", 1)
    return RunNotFoundError(text, run_id=exc.run_id)


def store_where(store: StateStore) -> str:
    """Where a store keeps its runs, for messages: a directory, ``postgresql://USER@HOST:
    PORT/DB``, ``github://OWNER/REPO@BRANCH``, a URL without credentials — never a password,
    a token or a repr (:func:`zuke.state.naming.store_name`)."""
    from zuke.state.naming import store_name

    return store_name(store)


@dataclass
class Invocation:
    """A management command's environment, streams, build file and store."""

    env: Mapping[str, str]
    out: TextIO
    err: TextIO
    build: type[Build] | None
    #: the ``--file`` value, if given
    file: str | None = None
    #: where relative store paths are resolved (the build file's directory)
    home: Path = field(default_factory=Path.cwd)
    #: why the build file could not be imported (``None``: it loaded, or there is none)
    problem: ZukeError | None = None
    #: the command only reads the store: a ``ZUKE_STATE_DIR`` that does not exist is an error
    reading: bool = True
    _tried: bool = False
    _store: StateStore | None = None

    def print(self, text: str) -> None:
        # a record an older zuke stored may hold a lone surrogate: shown as its JSON escape
        self.out.write(text.encode("utf-8", "backslashreplace").decode() + "\n")

    def load_build(self) -> type[Build] | None:
        """The build, imported once; ``None`` if there is no build file or it failed to load
        (then :attr:`problem` says why). A missing ``--file`` is a usage error; a missing
        ``ZUKE_FILE`` or ``./build.py`` is no build."""
        if self.build is not None or self._tried:
            return self.build
        self._tried = True
        from zuke._loader import find_build_file, load_build_class

        try:
            path = find_build_file(self.file, self.env)
        except UsageError:
            if self.file is not None:  # asked for on this line: a typo is an error
                raise
            return None
        try:
            self.build = load_build_class(path)
        except BuildDefinitionError as exc:
            self.problem = exc
        return self.build

    @property
    def opened(self) -> StateStore | None:
        """The store :meth:`store` opened, if it did."""
        return self._store

    def store(self) -> StateStore:
        """The store this command reads: the build's ``state_store()``, else the environment's,
        else ``.zuke/runs`` beside the build file. A build that fails to load is a warning."""
        if self._store is not None:
            return self._store
        from zuke.state.resolve import resolve_store

        build = self.load_build()
        override = None
        if build is not None:
            try:
                override = build().state_store()
            except Exception as exc:  # a raising hook: the same as a build that cannot load
                self.problem = BuildDefinitionError(
                    f"{build.__name__}.state_store() raised {type(exc).__name__}: {exc}"
                )
        store = resolve_store(override=override, env=self.env, required=True, cwd=self.home,
                              reading=self.reading)  # fmt: skip
        assert store is not None  # required=True always yields one
        if self.problem is not None:
            from zuke._inert import console_text

            self.err.write(
                f"zuke: {console_text(self.problem)}; reading the store without it: "
                f"{console_text(store_where(store))} (a state_store() of the build is not seen)\n"
            )
        self._store = store
        return store
