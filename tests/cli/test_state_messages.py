"""Issue 19 §3 items 5-6: ``ZUKE_STATE=http://…`` points at ``ZUKE_STATE_URL``; an unreachable
state URL is one line naming the URL (without credentials), what was tried and what to check."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import BuildWriter, CliRunner
from zuke._engine import claims
from zuke.state import _http_client

BUILD = """
    from zuke import Build, target

    class App(Build):
        @target
        def hello(self, t):
            return t.executes(lambda: print("HELLO"))
"""


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_zuke_state_with_an_http_url_points_at_zuke_state_url(
    write_build: BuildWriter, cli: CliRunner, scheme: str
) -> None:
    write_build(BUILD)
    for argv in (("runs", "list"), ("hello", "--state")):
        result = cli(*argv, env={"ZUKE_STATE": f"{scheme}://ops:hunter2@state.example/"})
        assert result.code == 2 and "HELLO" not in result.out  # a bad setting: a usage error
        assert result.err == (
            f"zuke: ZUKE_STATE={scheme}://… names no store: the HTTP state service is set with "
            f"ZUKE_STATE_URL={scheme}://… (and ZUKE_STATE_TOKEN); ZUKE_STATE takes "
            "postgresql://… or a store package's scheme such as github://\n"
        )


def test_an_unreachable_state_url_is_one_line_naming_the_url_what_was_tried_and_what_to_check(
    write_build: BuildWriter, cli: CliRunner, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims, "LEASE_ACQUIRE_BACKOFF_S", (0.0, 0.0))  # the attempts, not waits
    # nor the client's resends of each keyed write (0.2 + 0.5 s of real pauses per attempt)
    monkeypatch.setattr(_http_client, "RESEND_PAUSES_S", (0.0, 0.0))
    write_build(BUILD)
    env = {"ZUKE_STATE_URL": f"http://ops:hunter2@127.0.0.1:{closed_port}/"}
    result = cli("hello", "--state", env=env)
    assert result.code == 1 and "HELLO" not in result.out
    [line] = result.err.splitlines()
    assert line.startswith("zuke: Could not claim run ")
    assert "the state store did not answer (3 attempts over 0.0s): state: POST /locks/" in line
    assert f"Is the state service at http://***@127.0.0.1:{closed_port} up?" in line
    assert line.endswith("Check ZUKE_STATE_URL.") and line.count("Check") == 1
    assert "hunter2" not in result.text


def test_a_listing_on_an_unreachable_state_url_is_one_line(
    write_build: BuildWriter, cli: CliRunner, closed_port: int
) -> None:
    write_build(BUILD)
    env = {"ZUKE_STATE_URL": f"http://ops:hunter2@127.0.0.1:{closed_port}/"}
    result = cli("runs", "list", env=env)
    assert result.code == 1
    assert result.err == (
        "zuke: state: GET /runs could not connect (ConnectionRefusedError). Is the state service "
        f"at http://***@127.0.0.1:{closed_port} up? Check ZUKE_STATE_URL.\n"
    )
