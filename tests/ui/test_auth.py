"""The view's tokens and sessions: a cookie that proves the token without holding it."""

from __future__ import annotations

import pytest

from zuke._clock import ManualClock
from zuke._serve.ui import auth
from zuke._serve.ui.auth import SESSION_COOKIE, SESSION_MS, UiAuth

WRITE, READ = "write-token-0123456789", "read-token-9876543210"


def headers_with(value: str) -> dict[str, str]:
    return {"cookie": f"{SESSION_COOKIE}={value}"}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def gate(clock: ManualClock) -> UiAuth:
    return UiAuth(token=WRITE, read_token=READ, clock=clock)


def test_a_login_names_which_token_was_given_and_refuses_others(gate: UiAuth) -> None:
    assert gate.login(WRITE) == "write"
    assert gate.login(READ) == "read"
    for wrong in ("", WRITE[:-1], WRITE + "x", READ.upper(), " " + WRITE):
        assert gate.login(wrong) is None


def test_a_session_value_holds_neither_token_and_checks_out(gate: UiAuth) -> None:
    for kind, token in (("write", WRITE), ("read", READ)):
        value = gate.session_value(kind)  # type: ignore[arg-type]
        assert token not in value and token[:8] not in value
        session = gate.session(headers_with(value))
        assert session is not None and session.kind == kind


def test_a_session_made_with_another_token_is_refused(clock: ManualClock) -> None:
    other = UiAuth(token="another-write-token", read_token=READ, clock=clock)
    forged = other.session_value("write")
    assert UiAuth(token=WRITE, read_token=READ, clock=clock).session(headers_with(forged)) is None


def test_changing_the_token_ends_every_session_made_with_it(clock: ManualClock) -> None:
    value = UiAuth(token=WRITE, read_token=None, clock=clock).session_value("write")
    rotated = UiAuth(token=WRITE + "-rotated", read_token=None, clock=clock)
    assert rotated.session(headers_with(value)) is None


def test_a_session_lapses_after_its_lifetime(gate: UiAuth, clock: ManualClock) -> None:
    value = gate.session_value("read")
    clock.advance(SESSION_MS - 1)
    assert gate.session(headers_with(value)) is not None
    clock.advance(1)
    assert gate.session(headers_with(value)) is None


def test_a_session_from_far_in_the_future_is_refused(clock: ManualClock) -> None:
    ahead = ManualClock(clock.now_ms() + 3600_000)
    value = UiAuth(token=WRITE, read_token=None, clock=ahead).session_value("write")
    assert UiAuth(token=WRITE, read_token=None, clock=clock).session(headers_with(value)) is None


@pytest.mark.parametrize(
    "tamper",
    [
        lambda v: v.replace("v1.read.", "v1.write."),  # a read session made a write one
        lambda v: v[:-2] + ("AA" if not v.endswith("AA") else "BB"),  # the MAC changed
        lambda v: v.rsplit(".", 2)[0] + ".1." + v.rsplit(".", 1)[1],  # the time changed
        lambda v: "v2" + v[2:],
        lambda v: v + ".extra",
        lambda v: "",
        lambda v: "v1.read.12x.abc",
    ],
)
def test_a_tampered_session_is_refused(gate: UiAuth, tamper) -> None:
    assert gate.session(headers_with(tamper(gate.session_value("read")))) is None


def test_a_malformed_cookie_header_is_no_session(gate: UiAuth) -> None:
    assert gate.session({"cookie": '=";;\x00'}) is None
    assert gate.session({}) is None


def test_without_a_token_every_request_is_signed_in(clock: ManualClock) -> None:
    open_view = UiAuth(token=None, read_token=None, clock=clock)
    assert not open_view.required
    assert open_view.session({}) is not None


def test_the_login_form_value_must_come_back_in_its_cookie() -> None:
    value = auth.new_form_value()
    cookie = {"cookie": f"{auth.LOGIN_COOKIE}={value}"}
    assert auth.form_value_matches(cookie, value)
    assert not auth.form_value_matches(cookie, value[:-1])
    assert not auth.form_value_matches({}, value)  # a site that cannot set our cookie
    assert not auth.form_value_matches({"cookie": f"{auth.LOGIN_COOKIE}="}, "")


@pytest.mark.parametrize(
    ("headers", "allowed"),
    [
        ({}, True),  # a client that says nothing (curl)
        ({"sec-fetch-site": "same-origin", "origin": "http://h:1", "host": "h:1"}, True),
        ({"origin": "https://state.example", "host": "state.example"}, True),
        ({"sec-fetch-site": "cross-site"}, False),
        ({"sec-fetch-site": "same-site"}, False),
        ({"origin": "https://evil.example", "host": "state.example"}, False),
        ({"origin": "null", "host": "state.example"}, False),
    ],
)
def test_a_post_is_taken_only_from_this_origin(headers: dict[str, str], allowed: bool) -> None:
    assert auth.same_origin_post(headers) is allowed


def test_the_session_cookie_is_http_only_strict_and_scoped_to_the_view() -> None:
    cookie = auth.session_cookie("v1.read.1.mac", secure=False)
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui;" in cookie
    assert "Secure" not in cookie
    assert "; Secure" in auth.session_cookie("v1.read.1.mac", secure=True)
    assert auth.over_https({"origin": "https://state.example"})
    assert not auth.over_https({"origin": "http://127.0.0.1:8780"})
