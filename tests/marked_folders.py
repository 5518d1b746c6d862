"""Folders whose every test carries a marker, left uncollected when ``-m`` rules that marker out.

The README's inner loop (``pytest -m "not e2e and not act and not sim and not slow"``) deselects the
real-process, Action and simulation tests only after collecting them: each xdist worker
imported those ~15,000 lines of tests and rewrote their asserts (uncached under
``PYTHONDONTWRITEBYTECODE=1``, this VM's setting) to run none of them — about a fifth of
each worker's collection (issue 28 §7). So a folder in :data:`FOLDERS` is not collected at
all when the ``-m`` expression is false for every test that carries the folder's markers,
whatever other markers those tests have: the same tests are left out, only sooner.

That holds only while each folder's tests do carry its markers (its conftest's
``pytest_itemcollected``, or each module's ``pytestmark``). Whenever such a folder is
collected — CI's run and the whole suite collect all of them — every item in it is checked
and a test missing a marker stops the run before any test runs, naming it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

#: folder under tests/ → the markers every test in it carries (and whose conftest/module adds them)
FOLDERS: Mapping[str, frozenset[str]] = {
    "e2e": frozenset({"e2e"}),  # tests/e2e/conftest.py
    "chaos": frozenset({"chaos", "e2e"}),  # tests/chaos/conftest.py
    "ui/browser": frozenset({"ui", "e2e"}),  # tests/ui/browser/conftest.py
    "action": frozenset({"act"}),  # tests/action/conftest.py
    "sim": frozenset({"sim"}),  # each tests/sim/test_*.py's pytestmark
}
TESTS = Path(__file__).resolve().parent


class _Unknown(Exception):
    """An identifier the expression asked about that no assignment has fixed yet."""

    def __init__(self, key: tuple[str, frozenset[tuple[str, object]]]) -> None:
        super().__init__(key)
        self.key = key


def may_select(evaluate: Callable[[Callable[..., bool]], bool], present: frozenset[str]) -> bool:
    """Whether the expression (``evaluate``, given a matcher) can be true for some test that
    carries every marker in ``present``: each other identifier it asks about (a marker, or a
    marker with arguments) is tried both ways, as it may be on or off for some test."""

    def search(fixed: dict[tuple[str, frozenset[tuple[str, object]]], bool]) -> bool:
        def matcher(name: str, /, **kwargs: object) -> bool:
            if not kwargs and name in present:
                return True
            key = (name, frozenset(kwargs.items()))
            if key not in fixed:
                raise _Unknown(key)
            return fixed[key]

        try:
            return evaluate(matcher)
        except _Unknown as unknown:
            return search({**fixed, unknown.key: True}) or search({**fixed, unknown.key: False})

    return search({})


def _compiled(config: pytest.Config) -> Callable[[Callable[..., bool]], bool] | None:
    markexpr = getattr(config.option, "markexpr", "") or ""
    if not markexpr.strip():
        return None
    try:  # pytest's own parser of -m (not public API: any trouble and nothing is pruned)
        from _pytest.mark.expression import Expression

        return Expression.compile(markexpr).evaluate
    except Exception:  # a bad -m is pytest's to report, not this hook's
        return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    try:
        folder = collection_path.relative_to(TESTS).as_posix()
    except ValueError:
        return None
    present = FOLDERS.get(folder)
    if present is None:
        return None
    evaluate = _compiled(config)
    if evaluate is None or may_select(evaluate, present):
        return None
    return True


def unmarked(items: list[pytest.Item]) -> list[str]:
    """``nodeid (lacks: marker, …)`` for each item in a folder of :data:`FOLDERS` without
    every one of its markers."""
    found = []
    folders: dict[Path, Path | None] = {}  # one resolve a file, not one an item
    for item in items:
        if item.path not in folders:
            try:
                folders[item.path] = Path(item.path).resolve().relative_to(TESTS)
            except ValueError:
                folders[item.path] = None
        folder = folders[item.path]
        if folder is None:
            continue
        for name, present in FOLDERS.items():
            if folder.as_posix() == name or folder.as_posix().startswith(name + "/"):
                lacking = sorted(m for m in present if item.get_closest_marker(m) is None)
                if lacking:
                    found.append(f"{item.nodeid} (lacks: {', '.join(lacking)})")
    return found


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every collected item is checked
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = unmarked(items)
    if missing:
        raise pytest.UsageError(
            "tests in a marked folder (tests/marked_folders.py) lack its marker, so -m would "
            "leave them out uncollected: mark them (the folder's conftest or pytestmark):\n  "
            + "\n  ".join(missing)
        )
