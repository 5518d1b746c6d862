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
#: tests.sim.pg's: the database the simulation's Postgres stores share
PG_URL_ENV = "ZUKE_SIM_PG_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("zuke simulation")
    for flag, (env, text) in OPTIONS.items():
        group.addoption(flag, default=None, help=f"{text} (or {env})")


def setting(config: pytest.Config, flag: str) -> str | None:
    """The option's value, else its environment variable's (``None``: neither is set)."""
    value = config.getoption(flag, default=None)
    return str(value) if value is not None else os.environ.get(OPTIONS[flag][0]) or None


@pytest.fixture
def sim_pg_url(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A database for the simulation over Postgres (tests.sim.pg), named in the environment
    (worker processes inherit it): ``$ZUKE_SIM_PG_URL`` if set, else one on the session's
    throwaway cluster — ``pg_cluster``'s rules apply: skipped without Postgres, failed when
    ``ZUKE_REQUIRE_POSTGRES=1``."""
    url = os.environ.get(PG_URL_ENV) or request.getfixturevalue("pg_url")
    monkeypatch.setenv(PG_URL_ENV, url)
    return url


@pytest.fixture(autouse=True)
def _sim_store_postgres(request: pytest.FixtureRequest) -> None:
    """``ZUKE_SIM_STORE=postgres pytest tests/sim``: every test gets a database to simulate in."""
    if os.environ.get("ZUKE_SIM_STORE") == "postgres" and not os.environ.get(PG_URL_ENV):
        request.getfixturevalue("sim_pg_url")
