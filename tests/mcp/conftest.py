"""The build every in-process ``zuke mcp`` test starts from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mcp.support import BUILD, build_from
from zuke._build import Build


@pytest.fixture
def build(tmp_path: Path) -> type[Build]:
    return build_from(tmp_path, BUILD)
