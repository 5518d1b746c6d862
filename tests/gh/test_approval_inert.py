"""What ``github_approval`` writes on GitHub renders nothing it did not make, and carries no
secret: untrusted text (parameters, deny reasons, a local starter's name) is an inert code
span, and every text sent goes through the run's redactor — a secret inside another value
included."""

from __future__ import annotations

import json
import re

import pytest
import respx
from markdown_it import MarkdownIt

from tests.gh._approval_support import BOT, SHA, Hub, Probe, gate
from tests.gh.conftest import START_MS, MakeClient
from zuke import WaitFailed
from zuke._redact import Redactor
from zuke_gh import _approval_text as text

LATER = START_MS + 60_000
SECRET = "s3cret-deploy-token-4711"
HOSTILE = (
    "line one\n\n# a heading\r\n::add-mask::x\u2028::error::boom\n"
    "<script>alert(1)</script> <img src=x onerror=alert(1)> [click](https://evil.example) "
    "https://evil.example/bare @everyone #1 ``` `tick` ![i](https://evil.example/i.png) | a |"
)
RENDER = MarkdownIt("commonmark", {"html": True})


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain")
    return hub


def rendered_outside_code(markdown: str) -> str:
    """The HTML GitHub-flavoured rendering makes of ``markdown``, with every code span's
    content taken out (what is left is what zuke itself wrote)."""
    html = RENDER.render(markdown)
    return re.sub(r"<code>.*?</code>", "<code/>", html, flags=re.S)


def assert_inert(markdown: str) -> None:
    outside = rendered_outside_code(markdown)
    for made in ("<script", "<img", "<a ", "<h1", "<h2", "<table", "evil.example", "@everyone",
                 "::add-mask::", "::error::"):  # fmt: skip
        assert made not in outside, (made, outside)
    # no line of the text starts a workflow command, and no raw break came from a value
    assert not any(line.startswith("::") for line in markdown.splitlines())
    assert "\r" not in markdown and "\u2028" not in markdown


def test_hostile_parameters_are_inert_code_spans_in_the_issue(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe(params={"note": HOSTILE, "`odd name`": "x"})
    probe.check(gate(make_client()))
    body = hub.issues[1]["body"]
    assert_inert(body)
    assert body.splitlines()[0].startswith("<!-- zuke-approval run=run-1 ")
    html = RENDER.render(body)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown, as text, inside code


def test_a_hostile_deny_reason_is_inert_in_the_closing_comment(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe()
    probe.check(gate(make_client()))
    hub.say(1, "maint", "/deny\n" + HOSTILE)
    answer = probe.check(gate(make_client()), LATER)
    assert isinstance(answer, WaitFailed)
    closing = hub.on(1)[-1]["body"]
    assert closing.startswith("<!-- zuke-approval-closed") and "Denied by @maint" in closing
    assert_inert(closing)


def test_a_local_starters_name_is_inert_and_the_issue_says_github_never_vouched_for_it(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe(actor="<b>alice</b>\n# x", source="local")
    probe.check(gate(make_client(), lambda a: a.no_self_approval()))
    body = hub.issues[1]["body"]
    assert_inert(body)
    assert "except the GitHub login `<b>alice</b> # x`: the run was started under" in body
    assert "GitHub never vouched for" in body


def test_inert_text_survives_every_backtick_run_and_blank_values() -> None:
    for value in ("`", "``x``", "a ``` b", " lead", "trail ", "", "   ", "x" * 300):
        span = text.inert(value)
        html = RENDER.render(f"- {span}")
        assert html.count("<code>") == 1 or value.strip() == "", (value, span, html)
    assert text.inert("x" * 300).count("x") == text.VALUE_LIMIT
    assert text.mention("alice") == "@alice" and text.mention("ci[bot]") == "@ci[bot]"
    assert text.mention("al ice") == "`al ice`" and text.mention("@x") == "`@x`"
    assert text.plain("a\nb\r\u2028c" + "d" * 300).startswith("a b c") and len(
        text.plain("d" * 300)) == text.TITLE_LIMIT  # fmt: skip


def test_a_secret_inside_another_parameter_reaches_no_request_body(
    hub: Hub, make_client: MakeClient
) -> None:
    redactor = Redactor([SECRET])
    url = f"https://deploy:{SECRET}@host.example/x"
    # long enough that a cut at the value limit would split the secret if it came first
    long = "y" * (text.VALUE_LIMIT - 10) + SECRET
    probe = Probe(params={"url": url, "long": long}, redact=redactor.text)
    trigger = gate(make_client())
    probe.check(trigger)
    hub.say(1, "nobody", f"/approve {SECRET}")  # a reply quotes nothing, but check anyway
    probe.check(trigger, LATER)
    hub.say(1, "maint", f"/deny leaked {SECRET} here")
    assert isinstance(probe.check(trigger, LATER + 60_000), WaitFailed)
    sent = json.dumps([hub.issues[1], [c for c in hub.on(1) if c["user"]["login"] == BOT]])
    assert SECRET not in sent and SECRET[:10] not in sent  # no cut left a piece of it
    assert "[redacted]" in hub.issues[1]["body"] and "[redacted]" in hub.on(1)[-1]["body"]


def test_the_marker_is_kept_as_it_was_written_after_redaction(
    hub: Hub, make_client: MakeClient
) -> None:
    probe = Probe(redact=Redactor(["run-1-secret"]).text)
    probe.run_id = "run-1-secret-x"
    probe.check(gate(make_client()))
    assert probe.meta["marker"] in hub.issues[1]["body"]
    assert "run-1-secret" not in hub.issues[1]["body"]
    assert "run-1-secret" not in hub.issues[1]["title"]
