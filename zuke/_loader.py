"""Finding and importing the build file (``build.py``, ``--file``, ``ZUKE_FILE``).

A path that is not a build file gets an error saying what it is instead (a
directory, a device such as ``/dev/null``, not a ``.py`` file), and a build
file that stops the interpreter while it is imported (``sys.exit(5)``) gets
one naming the call: zuke imports the file, it never runs it as a script.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import CodeType
from typing import TYPE_CHECKING

from zuke._errors import BuildDefinitionError, UsageError

if TYPE_CHECKING:
    from zuke._build import Build

DEFAULT_BUILD_FILE = "build.py"


class _SourceOnly(importlib.machinery.SourceFileLoader):
    """Compiles the file's source every time, never its cached bytecode."""

    def get_code(self, fullname: str) -> CodeType:
        return self.source_to_code(self.get_data(self.path), self.path)


def find_build_file(explicit: str | None, env: Mapping[str, str], cwd: Path | None = None) -> Path:
    """The build file to load; a missing one is a :class:`UsageError` saying how to point at one."""
    where = cwd or Path.cwd()
    chosen = explicit or env.get("ZUKE_FILE") or DEFAULT_BUILD_FILE
    path = (where / chosen).resolve()
    origin = "--file" if explicit else ("ZUKE_FILE" if env.get("ZUKE_FILE") else "default")
    if path.is_dir():
        raise UsageError(
            f"Not a build file: {chosen} ({origin}) is a directory; "
            f"pass the build file in it, e.g. --file {Path(chosen) / DEFAULT_BUILD_FILE}."
        )
    if path.exists() and not path.is_file():
        raise UsageError(
            f"Not a build file: {chosen} ({origin}) is not a regular file (a device, pipe or "
            "socket); pass the path of a Python build file."
        )
    if not path.is_file():
        raise UsageError(
            f"No build file: {chosen} ({origin}) does not exist in {where}. "
            "Create build.py, pass --file PATH, or set ZUKE_FILE."
        )
    if path.suffix != ".py":
        raise UsageError(
            f"Not a build file: {chosen} ({origin}) is not a Python file; "
            "a build file's name ends in .py."
        )
    return path


def build_home(explicit: str | None, env: Mapping[str, str], cwd: Path | None = None) -> Path:
    """The directory a relative store path (``.zuke/runs``, ``ZUKE_STATE_DIR``) is resolved
    against: the build file's (``--file``, ``ZUKE_FILE``, ``./build.py``), found without
    importing it, so a command that never loads the build still reads the build's store;
    the working directory when there is no build file."""
    where = (cwd or Path.cwd()).resolve()
    chosen = explicit or env.get("ZUKE_FILE") or DEFAULT_BUILD_FILE
    path = (where / chosen).resolve()
    return path.parent if path.is_file() else where


def load_build_class(path: Path, *, fresh: bool = False) -> type[Build]:
    """Import ``path`` and return the build it defines. ``fresh`` (a watcher reading the file
    again after it failed to load) compiles the source as it is now: cached bytecode is
    trusted by the source's mtime in whole seconds and its size, so a fix of the same size
    within the second would otherwise load the broken file again."""
    from zuke._build import Build  # here, so finding a build file needs no authoring modules

    module_name = "_zuke_build_" + path.stem.replace("-", "_")
    loader = _SourceOnly(module_name, str(path)) if fresh else None
    if fresh:
        importlib.invalidate_caches()  # a module the fix added is found, too
    spec = importlib.util.spec_from_file_location(module_name, path, loader=loader)
    if spec is None or spec.loader is None:
        raise BuildDefinitionError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    directory = str(path.parent)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(module_name, None)
        frames = traceback.extract_tb(exc.__traceback__)
        inside = [f for f in frames if f.filename == str(path)]
        line = inside[-1].lineno if inside else None
        if isinstance(exc, SyntaxError) and exc.filename == str(path):
            line = exc.lineno  # raised while compiling: no frame of the file itself
        at = f" (line {line})" if line else ""
        if isinstance(exc, SystemExit):
            raise BuildDefinitionError(
                f"loading {path.name} failed{at}: it called sys.exit({exc.code!r}) while being "
                "imported; a build file only defines the build (put script code under "
                '`if __name__ == "__main__":`)'
            ) from None
        said = exc.msg if isinstance(exc, SyntaxError) else str(exc)  # without "(file, line)"
        raise BuildDefinitionError(
            f"loading {path.name} failed{at}: {type(exc).__name__}: {said}"
        ) from exc
    candidates = [
        value
        for value in vars(module).values()
        if isinstance(value, type)
        and issubclass(value, Build)
        and value is not Build
        and value.__module__ == module_name
    ]
    leaves = [c for c in candidates if not any(o is not c and issubclass(o, c) for o in candidates)]
    if not leaves:
        raise BuildDefinitionError(
            f"{path.name} defines no build: declare a class that subclasses zuke.Build"
        )
    if len(leaves) > 1:
        names = ", ".join(c.__name__ for c in leaves)
        raise BuildDefinitionError(
            f"{path.name} defines several builds ({names}); keep one per file, or run the file "
            'itself with run(YourBuild) under `if __name__ == "__main__":`'
        )
    return leaves[0]
