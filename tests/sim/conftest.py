"""Options of the simulation: each one an option of ``pytest tests/sim`` and an environment
variable (the variable works however pytest is started)."""

from __future__ import annotations

import os

import pytest

OPTIONS = {
    "--sim-seed": ("ZUKE_SIM_SEED", "run this one seed (test_one_seed) and print its schedule"),
    "--sim-seeds": ("ZUKE_SIM_SEEDS", "how many seeds test_seeds runs (default 2000)"),
    "--sim-start": ("ZUKE_SIM_START", "the first seed test_seeds and test_soak run (default 0)"),
    "--sim-soak": ("ZUKE_SIM_SOAK", "test_soak runs seeds for this many seconds"),
    "--sim-ignore": ("ZUKE_SIM_IGNORE", "invariants (comma-separated) that do not end a seed"),
    "--sim-workers": ("ZUKE_SIM_WORKERS", "processes test_seeds runs in (default: 2, or 1 core)"),
}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("zuke simulation")
    for flag, (env, text) in OPTIONS.items():
        group.addoption(flag, default=None, help=f"{text} (or {env})")


def setting(config: pytest.Config, flag: str) -> str | None:
    """The option's value, else its environment variable's (``None``: neither is set)."""
    value = config.getoption(flag, default=None)
    return str(value) if value is not None else os.environ.get(OPTIONS[flag][0]) or None
