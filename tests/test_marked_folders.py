"""The folders ``-m`` rules out are left uncollected (issue 28 §7), and never wrongly."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from _pytest.mark.expression import Expression

from tests.marked_folders import FOLDERS, TESTS, may_select, pytest_ignore_collect, unmarked

INNER = "not e2e and not act and not sim and not slow"


def selectable(expression: str, *present: str) -> bool:
    return may_select(Expression.compile(expression).evaluate, frozenset(present))


@pytest.mark.parametrize(
    ("expression", "present", "expected"),
    [
        (INNER, ("e2e",), False),
        (INNER, ("act",), False),
        (INNER, ("sim",), False),
        (INNER, ("chaos", "e2e"), False),
        ("not e2e", ("act",), True),  # an Action test without e2e is still wanted
        ("e2e", ("act",), True),  # some Action test might also be marked e2e
        ("not ui", ("ui", "e2e"), False),
        ("ui or not e2e", ("chaos", "e2e"), True),  # a chaos test might be marked ui too
        ("not chaos and e2e", ("chaos", "e2e"), False),
        ("e2e and not e2e", (), False),
        ("slow", ("sim",), True),
        ("not slow", ("sim",), True),
        ('not e2e(reason="x")', ("e2e",), True),  # a marker's arguments are another question
    ],
)
def test_a_folder_is_ruled_out_only_when_no_test_with_its_markers_could_be_selected(
    expression: str, present: tuple[str, ...], expected: bool
) -> None:
    assert selectable(expression, *present) is expected


def config(markexpr: str) -> pytest.Config:
    return cast(pytest.Config, SimpleNamespace(option=SimpleNamespace(markexpr=markexpr)))


def test_the_inner_loop_collects_none_of_the_marked_folders_and_everything_else() -> None:
    for folder in FOLDERS:
        assert pytest_ignore_collect(TESTS / folder, config(INNER)) is True, folder
    for other in ("engine", "ui", "gh", "ui/browser/support.py"):
        assert pytest_ignore_collect(TESTS / other, config(INNER)) is None, other
    assert pytest_ignore_collect(TESTS / "e2e", config("")) is None  # the whole suite
    assert pytest_ignore_collect(TESTS / "e2e", config("e2e or act")) is None
    assert pytest_ignore_collect(TESTS / "action", config("not e2e")) is None
    assert pytest_ignore_collect(TESTS / "e2e", config("not (")) is None  # pytest says why


@dataclass
class Item:
    nodeid: str
    markers: set[str] = field(default_factory=set)

    @property
    def path(self) -> Path:
        return TESTS.parent / self.nodeid.split("::")[0]

    def get_closest_marker(self, name: str) -> Any:
        return name if name in self.markers else None


def test_a_test_in_a_marked_folder_without_its_markers_is_named() -> None:
    items = [
        Item("tests/e2e/test_a.py::test_x", {"e2e", "xdist_group"}),
        Item("tests/e2e/test_a.py::test_y"),
        Item("tests/ui/browser/test_b.py::test_z", {"ui"}),
        Item("tests/ui/test_pages.py::test_w"),  # not a marked folder
        Item("tests/sim/test_sim.py::test_v", {"sim"}),
    ]
    assert unmarked(cast(list[pytest.Item], items)) == [
        "tests/e2e/test_a.py::test_y (lacks: e2e)",
        "tests/ui/browser/test_b.py::test_z (lacks: e2e)",
    ]


def test_every_marked_folder_exists() -> None:
    assert all((TESTS / folder / "conftest.py").is_file() for folder in FOLDERS)
