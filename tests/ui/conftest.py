"""The web view's tests: a ``zuke serve`` on a thread, with both tokens (``tests.ui.support``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ui.support import Served, view_server


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    with view_server(tmp_path) as s:
        yield s
