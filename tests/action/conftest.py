"""The GitHub Action's tests (nektos/act workflows, schemas, the audit): marked ``act``, so the
inner loop (``pytest -m "not e2e and not act"``) leaves the folder out; CI runs it."""

from __future__ import annotations

import pytest


def pytest_itemcollected(item: pytest.Item) -> None:
    item.add_marker(pytest.mark.act)  # this conftest's hooks see only this folder's items
    # Under xdist with --dist loadgroup (the README's whole-suite command), all of these
    # run on one worker, one at a time, beside the other worker's unit tests.
    item.add_marker(pytest.mark.xdist_group("act"))
