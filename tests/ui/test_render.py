"""Rendering: record text made visible and escaped, times, and where a run is at."""

from __future__ import annotations

import pytest
from markupsafe import Markup

from zuke._serve.ui import queries
from zuke._serve.ui.gate_view import describe_trigger, safe_url, target_links
from zuke._serve.ui.queries import BadQuery, namespace, since_ms, where_at
from zuke._serve.ui.render import badge, span, stamp, visible, when
from zuke.state.records import TargetRecord

NOW = 1_800_000_000_000


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain", "plain"),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        ("rtl\u202eoverride", "rtl\\u202eoverride"),
        ("esc\x1b[2J", "esc\\u001b[2J"),
        ("line\u2028sep", "line\\u2028sep"),
        ("nul\x00", "nul\\u0000"),
        ("cr\r", "cr\\u000d"),
    ],
)
def test_control_bidi_and_separator_characters_are_shown_as_escapes(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_markup_the_view_made_is_left_alone_and_record_text_is_escaped() -> None:
    assert visible(Markup("<b>\u202e</b>")) == Markup("<b>\u202e</b>")
    assert badge('x"><script>') == Markup(
        '<span class="badge s-x&#34;&gt;&lt;script&gt;"><span class="glyph" aria-hidden="true">'
        "</span> x&#34;&gt;&lt;script&gt;</span>"
    )
    assert when("<i>not a time</i>") == Markup("&lt;i&gt;not a time&lt;/i&gt;")
    assert when("2026-01-15T09:30:05.123Z") == Markup(
        '<time datetime="2026-01-15T09:30:05.123Z">2026-01-15 09:30:05 UTC</time>'
    )
    assert stamp(None) == "—"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "—"),
        (-5, "<1 min"),
        (59_999, "<1 min"),
        (60_000, "1 min"),
        (3_599_999, "59 min"),
        (3_600_000, "1 h 00 min"),
        (47 * 3_600_000 + 60_000, "47 h 01 min"),
        (49 * 3_600_000, "2 d 1 h"),
    ],
)
def test_a_span_changes_at_most_once_a_minute(ms: int | None, text: str) -> None:
    assert span(ms) == text


def test_since_takes_an_instant_or_a_duration_back_from_now() -> None:
    assert since_ms("2026-01-15T00:00:00Z", NOW) == 1_768_435_200_000
    assert since_ms("24h", NOW) == NOW - 86_400_000
    assert since_ms(None, NOW) is None
    with pytest.raises(BadQuery, match="since must be"):
        since_ms("last tuesday", NOW)


@pytest.mark.parametrize("ns", ["..", "a/../b", "a b", "/".join("x" * 9), "x" * 201])
def test_an_unsafe_namespace_is_refused(ns: str) -> None:
    with pytest.raises(BadQuery):
        namespace({"ns": ns})
    assert namespace({"ns": "/team-a/eu/"}) == "team-a/eu"


def test_a_filter_value_has_a_length_bound() -> None:
    with pytest.raises(BadQuery, match="longer than"):
        queries.parse_filter({"build": "x" * 201})


def test_where_a_run_is_at_comes_from_its_record() -> None:
    raw = {
        "targets": {
            "a": {"status": "waiting", "startedAt": "2", "waitingFor": {"trigger": "signal:go"}},
            "b": {"status": "waiting", "startedAt": "1", "waitingFor": {"trigger": "predicate"}},
            "c": {"status": "failed", "endedAt": "9"},
            "d": {"status": "failed", "endedAt": "3"},
            "e": {"status": "running", "startedAt": "5"},
            "f": "not a row",
        }
    }
    assert [(a.name, a.detail) for a in where_at(raw, "suspended")] == [
        ("b", "predicate"),
        ("a", "signal:go"),
    ]
    assert [a.name for a in where_at(raw, "failed")] == ["d"]  # the first to fail
    assert [a.name for a in where_at(raw, "running")] == ["e"]
    assert where_at({"targets": []}, "running") == ()


def test_what_a_gate_waits_for_is_read_from_its_trigger() -> None:
    assert describe_trigger("signal:qa-approved") == ("the signal 'qa-approved'", "qa-approved")
    assert describe_trigger("github:acme/app:e2e.yml")[0] == "the workflow e2e.yml in acme/app"
    assert describe_trigger("github-approval:acme/app")[0].startswith("approval in a GitHub")
    assert describe_trigger("custom-thing") == ("custom-thing", None)


def test_links_come_from_known_fields_and_only_for_http() -> None:
    row = TargetRecord(
        meta={
            "runUrl": "https://github.com/a/b/actions/runs/1",
            "issueUrl": "javascript:x",
            "deployment": {"url": "https://api.github.com/d/1", "logUrl": "ftp://x"},
        },
        extra={"environment": {"name": "staging", "url": "https://staging.example.com"}},
    )
    assert [(link.label, link.url) for link in target_links(row)] == [
        ("environment", "https://staging.example.com"),
        ("workflow run", "https://github.com/a/b/actions/runs/1"),
        ("deployment", "https://api.github.com/d/1"),
    ]
    for bad in ("https://", "http://x y", "https://a\x00b", "//evil", 7, "https://" + "a" * 3000):
        assert safe_url(bad) is None


def test_the_environment_and_its_url_come_from_the_rows_own_fields() -> None:
    from zuke._serve.ui.gate_view import environment_of

    row = TargetRecord(environment="staging", environment_url="https://staging.example.com")
    assert environment_of(row) == "staging"
    assert [(link.label, link.url) for link in target_links(row)] == [
        ("environment", "https://staging.example.com"),
    ]
    assert target_links(TargetRecord(environment="x", environment_url="javascript:x")) == []
    older = TargetRecord(meta={"environment": "production"})  # a record from before the field
    assert environment_of(older) == "production"
