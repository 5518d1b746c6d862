"""``github_approval``'s settings: each checked when the build loads, a bad one a single
``zuke: ...`` line naming it (exit 2), before any issue is opened."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import BuildWriter, CliRunner
from tests.runs.support import release_build
from zuke import BuildDefinitionError
from zuke._engine.run import load
from zuke_gh import Approval, github_approval, read_approval
from zuke_gh._approval_settings import ApprovalSettings, effective_role
from zuke_gh._approval_text import command, marker, parse_marker

BAD: list[tuple[Callable[[ApprovalSettings], Any], str]] = [
    (lambda a: a.repo("acme"), "repository 'acme' is refused"),
    (lambda a: a.role("read"), 'role() takes "write", "maintain" or "admin", got \'read\''),
    (lambda a: a.role("triage"), "role() takes"),
    (lambda a: a.approvals(0), "approvals() takes a whole number of at least 1, got 0"),
    (lambda a: a.approvals(True), "approvals() takes"),
    (lambda a: a.users("bad login!"), "users() takes GitHub logins, got 'bad login!'"),
    (lambda a: a.users("-dash"), "users() takes GitHub logins"),
    (lambda a: a.teams("noslash"), "teams() takes \"org/team-slug\", got 'noslash'"),
    (lambda a: a.teams("acme/"), "teams() takes"),
    (lambda a: a.on_issue(0), "on_issue() takes an issue or pull request number, got 0"),
    (lambda a: a.on_issue(3).on_pull_request(4), "set only one"),
    (lambda a: a.client("nope"), "client() takes a callable"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("configure", "message"), BAD)
def test_a_bad_setting_is_a_definition_error_naming_it(
    configure: Callable[[ApprovalSettings], Any], message: str
) -> None:
    with pytest.raises(BuildDefinitionError, match=r"^github_approval: ") as raised:
        github_approval(configure)
    assert message in str(raised.value)


def test_a_bad_setting_fails_the_build_load_in_one_line() -> None:
    def gate(build: Any, s: Any) -> Any:
        return s.on(github_approval(lambda a: a.approvals(0)))

    build = release_build(None, [], gate=gate)
    with pytest.raises(BuildDefinitionError) as raised:
        load(build, {}, {})
    text = str(raised.value)
    assert text == "github_approval: approvals() takes a whole number of at least 1, got 0"
    assert "\n" not in text


def test_good_settings_freeze_as_given() -> None:
    trigger = github_approval(
        lambda a: a.repo("acme/app").role("maintain").approvals(2).no_self_approval()
        .users("@Alice", "bob").teams("Acme/Release-Team").on_pull_request(7)
    )  # fmt: skip
    spec = trigger.spec  # type: ignore[attr-defined]
    assert spec.repo == ("acme", "app") and spec.role == "maintain" and spec.approvals == 2
    assert spec.no_self_approval and spec.users == frozenset({"alice", "bob"})
    assert spec.teams == (("acme", "release-team"),)
    assert (spec.thread_kind, spec.thread) == ("pull_request", 7)
    assert trigger.descriptor == "github-approval:acme/app"


def test_the_role_of_a_permission_answer() -> None:
    assert effective_role({"role_name": "maintain", "permission": "write"}) == "maintain"
    assert effective_role({"role_name": "release-manager", "permission": "write"}) == "write"
    assert effective_role({"role_name": "odd", "permission": "push"}) == "write"
    assert effective_role({"role_name": "odd", "permission": "none"}) == "none"
    assert effective_role({}) == "none"


def test_a_custom_role_is_judged_by_its_exact_grant_not_the_legacy_permission() -> None:
    # A custom role built on maintain: the legacy `permission` rounds it down to write;
    # `user.permissions` (OpenAPI repository-collaborator-permission) has the exact answer.
    grants = {"admin": False, "maintain": True, "push": True, "triage": True, "pull": True}
    body = {"role_name": "release-manager", "permission": "write",
            "user": {"login": "rm", "permissions": grants}}  # fmt: skip
    assert effective_role(body) == "maintain"
    triage = {**grants, "maintain": False, "push": False}
    assert effective_role({**body, "permission": "read", "user": {"permissions": triage}}) == (
        "triage")  # fmt: skip
    none = dict.fromkeys(grants, False)
    assert effective_role({"role_name": "", "permission": "none",
                           "user": {"permissions": none}}) == "none"  # fmt: skip


def test_commands_and_markers() -> None:
    assert command("/approve") == ("approve", "")
    assert command("  /APPROVE ship it\nmore") == ("approve", "ship it")
    assert command("/deny   not today  ") == ("deny", "not today")
    assert command("/deny\n\nbecause\nreasons") == ("deny", "because\nreasons")
    assert command("/deny " + "x" * 900) == ("deny", "x" * 500)
    for no in ("", "approve", "/approved", "hi\n/approve", None, 3):
        assert command(no) is None
    mark = marker("r 1", "deploy[a-->b].qa", "abc")
    assert "-->" not in mark[4:-3]
    assert parse_marker(f"text\n{mark}\n") == {"run": "r 1", "gate": "deploy[a-->b].qa",
                                               "commit": "abc"}  # fmt: skip


def test_read_approval_reads_a_state_or_its_get_and_tolerates_malformed_fields() -> None:
    class Handle:
        def get(self) -> dict[str, Any]:
            return {"decision": {"approved": True, "approvers": [{"login": "a"}, "junk"]}}

    approval = read_approval(Handle())
    assert isinstance(approval, Approval) and approval.approved
    assert [(a.login, a.role) for a in approval.approvers] == [("a", "")]
    assert read_approval({"decision": "junk"}) is None and read_approval(None) is None


def test_the_cli_says_a_bad_setting_in_one_zuke_line_and_exits_2(
    write_build: BuildWriter, cli: CliRunner
) -> None:
    write_build(
        """
        from zuke import Build, target
        from zuke_gh import github_approval

        class Release(Build):
            @target
            def qa(self, t):
                return t.waits_for(lambda s: s.on(github_approval(lambda a: a.role("owner"))))
        """
    )
    result = cli("qa")
    assert result.code == 2
    assert result.err.strip() == (
        'zuke: github_approval: role() takes "write", "maintain" or "admin", got \'owner\''
    )
