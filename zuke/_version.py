"""zuke's version, in a module of its own: ``zuke --version``, ``zuke --help`` and MCP's
server info read it without importing the public surface (or the engine). Keep it equal to
``pyproject.toml``'s ``version`` (``tests/cli/test_version.py`` checks)."""

from __future__ import annotations

__version__ = "0.1.0"
