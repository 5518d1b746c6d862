"""Chaos on real Postgres: marked ``chaos`` (and ``e2e``: real processes), so the inner loop
leaves the folder out; CI runs it."""

from __future__ import annotations

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.chaos)
    item.add_marker(pytest.mark.e2e)
    # Under xdist with --dist loadgroup (the README's whole-suite command), all of these
    # run on one worker, one at a time, beside the other worker's unit tests.
    item.add_marker(pytest.mark.xdist_group("e2e"))
