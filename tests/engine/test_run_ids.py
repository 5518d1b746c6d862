"""A run's id and its OS user, made without ``uuid`` and ``getpass`` (issue 28 §1)."""

from __future__ import annotations

import getpass
import uuid

import pytest

from zuke._engine.run import new_run_id
from zuke._provenance import _os_user, resolve


def test_a_run_id_is_a_version_4_uuid_as_uuid_spells_it() -> None:
    ids = {new_run_id() for _ in range(200)}
    assert len(ids) == 200
    for run_id in ids:
        parsed = uuid.UUID(run_id)
        assert str(parsed) == run_id
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


@pytest.mark.parametrize("variable", ["LOGNAME", "USER", "LNAME", "USERNAME"])
def test_the_os_user_is_the_one_getpass_finds(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, "ada")
    assert _os_user() == getpass.getuser() == "ada"
    assert resolve(None, {}).name == "ada"


def test_without_a_variable_the_os_user_comes_from_the_password_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    assert _os_user() == getpass.getuser()
