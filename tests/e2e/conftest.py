"""Every test here spawns real zuke processes: marked ``e2e``, so the inner loop
(``pytest -m "not e2e and not act"``) leaves the folder out; CI runs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.support import reap_spawned


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.e2e)  # this conftest's hooks see only this folder's items
    # Under xdist with --dist loadgroup (the README's whole-suite command), all of these
    # run on one worker, one at a time, beside the other worker's unit tests.
    item.add_marker(pytest.mark.xdist_group("e2e"))


@pytest.fixture(autouse=True)
def _reap_spawned() -> Iterator[None]:
    """Whatever a test spawned and left running is killed and reaped when it ends (pass or
    fail): see ``support.reap_spawned``."""
    yield
    reap_spawned()
