"""A sweep's batched look (``WaitTrigger.prefetch``): one GraphQL request asks every waiting
approval gate's thread whether anything came after its cursor, so idle gates cost no request
of their own; a refused token, a spent budget and a thread the batch cannot answer are each
handled without losing a comment."""

from __future__ import annotations

from typing import Any

import pytest
import respx

from tests.gh._approval_support import GRAPHQL, SHA, Hub, Probe, gate, looked
from tests.gh.conftest import START_MS, MakeClient
from zuke import NotYet, Satisfied, WaitTrigger
from zuke_gh._approval_settings import ApprovalSettings
from zuke_gh.errors import GitHubAccessError

LATER = START_MS + 60_000


@pytest.fixture
def hub(router: respx.Router, monkeypatch: pytest.MonkeyPatch) -> Hub:
    monkeypatch.setenv("GITHUB_SHA", SHA)
    hub = Hub(router)
    hub.roles.update(maint="maintain")
    return hub


def waiting(hub: Hub, make_client: MakeClient, count: int) -> tuple[WaitTrigger, list[Probe]]:
    """``count`` gates (one run each), each with its issue open and read once."""
    client = make_client()
    trigger = gate(client)
    probes = []
    for n in range(count):
        probe = Probe()
        probe.run_id = f"run-{n}"
        probe.check(trigger)
        probes.append(probe)
    return trigger, probes


def test_idle_gates_cost_one_request_in_all_and_a_gate_with_news_reads_for_itself(
    hub: Hub, make_client: MakeClient
) -> None:
    trigger, probes = waiting(hub, make_client, 3)
    hub.say(2, "maint", "/approve")
    calls = len(hub.calls)
    shared = looked(trigger, *probes, now_ms=LATER)
    assert hub.calls[calls:] == [GRAPHQL]
    answers = [p.check(trigger, LATER, shared) for p in probes]
    assert [type(a) for a in answers] == [NotYet, Satisfied, NotYet]
    # the batch, then gate 2's own read, the approver's role, its closing comment and the
    # close: nothing else
    assert hub.calls[calls:] == [GRAPHQL, GRAPHQL,
                                 "GET /repos/acme/app/collaborators/maint/permission",
                                 "POST /repos/acme/app/issues/2/comments",
                                 "PATCH /repos/acme/app/issues/2"]  # fmt: skip
    assert "0 of 1 approvals" in (answers[0].reason or "")


def test_a_hundred_and_fifty_gates_are_asked_in_two_queries(
    hub: Hub, make_client: MakeClient
) -> None:
    trigger, probes = waiting(hub, make_client, 150)
    calls = len(hub.calls)
    shared = looked(trigger, *probes, now_ms=LATER)
    for probe in probes:
        assert isinstance(probe.check(trigger, LATER, shared), NotYet)
    assert hub.calls[calls:] == [GRAPHQL, GRAPHQL]
    sizes = [q["query"].count("comments(first: 1") for q in hub.queries[-2:]]
    assert sizes == [100, 50]


def test_decided_and_unopened_gates_are_not_asked(hub: Hub, make_client: MakeClient) -> None:
    trigger, (decided, open_) = waiting(hub, make_client, 2)
    hub.say(1, "maint", "/approve")
    assert isinstance(decided.check(trigger, LATER), Satisfied)
    fresh = Probe()  # reached, not opened yet
    fresh.run_id = "run-new"
    calls = len(hub.calls)
    looked(trigger, decided, open_, fresh, now_ms=LATER)
    assert hub.calls[calls:] == [GRAPHQL]
    assert hub.queries[-1]["query"].count("comments(first: 1") == 1


def test_a_memo_for_another_cursor_is_not_used(hub: Hub, make_client: MakeClient) -> None:
    trigger, (probe,) = waiting(hub, make_client, 1)
    shared = looked(trigger, probe, now_ms=LATER)  # idle, for the cursor it had then
    hub.say(1, "maint", "lgtm")
    probe.check(trigger, LATER)  # a check outside the sweep moved the cursor
    hub.say(1, "maint", "/approve")
    assert isinstance(probe.check(trigger, LATER, shared), Satisfied)


def test_a_refused_token_is_raised_by_the_batch_and_by_every_check_without_a_request(
    hub: Hub, make_client: MakeClient
) -> None:
    trigger, probes = waiting(hub, make_client, 2)
    hub.graphql_status = 401
    shared: dict[str, Any] = {}
    contexts = [p.context(LATER, shared) for p in probes]
    import asyncio

    with pytest.raises(GitHubAccessError) as caught:
        asyncio.run(trigger.prefetch(contexts))
    assert "401" in str(caught.value) and "check the token given to GitHubClient" in str(
        caught.value)  # fmt: skip
    calls = len(hub.calls)
    for probe in probes:
        with pytest.raises(GitHubAccessError):
            probe.check(trigger, LATER, shared)
    assert hub.calls[calls:] == []


def test_a_spent_read_budget_puts_every_gate_off_without_a_request(
    hub: Hub, make_client: MakeClient
) -> None:
    trigger, probes = waiting(hub, make_client, 2)
    hub.rate = {"x-ratelimit-limit": "1000", "x-ratelimit-remaining": "150",
                "x-ratelimit-reset": "1700003600"}  # fmt: skip
    hub.say(1, "maint", "/approve")
    probes[0].check(trigger, LATER)  # a read that hears the budget: 850 of 1,000 spent
    calls = len(hub.calls)
    shared = looked(trigger, *probes, now_ms=LATER)
    answers = [p.check(trigger, LATER, shared) for p in probes[1:]]
    assert hub.calls[calls:] == []
    assert "put off to the next sweep: GitHub's `graphql` budget has 150 of 1000 left" in (
        answers[0].reason or "")  # fmt: skip
    hub.rate = {}


def test_a_thread_the_batch_cannot_answer_is_read_by_its_gate(
    hub: Hub, make_client: MakeClient
) -> None:
    trigger, (probe,) = waiting(hub, make_client, 1)
    probe.meta["issue"] = 99  # gone: GraphQL says NOT_FOUND for it
    shared = looked(trigger, probe, now_ms=LATER)
    answer = probe.check(trigger, LATER, shared)
    assert "the thread is gone" in getattr(answer, "reason", "")


def test_gates_share_a_batch_by_their_client(make_client: MakeClient) -> None:
    from zuke_gh import github_approval

    def factory() -> Any:
        return make_client()

    def on(repo: str) -> Any:
        return lambda a: ApprovalSettings.repo(a, repo).client(factory)

    one, other = github_approval(on("acme/app")), github_approval(on("acme/web"))
    assert one.batch_key() == other.batch_key()  # one client: one query, across repositories
    assert one.batch_key() != gate(make_client()).batch_key()
    assert github_approval(lambda a: a).batch_key() == github_approval(lambda a: a).batch_key()


def test_threads_of_two_repositories_share_one_query(
    router: respx.Router, make_client: MakeClient
) -> None:
    import json

    import httpx

    from zuke_gh._approval_api import Repo
    from zuke_gh._approval_reads import Asked, news

    sent: list[dict[str, Any]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(json.loads(request.content))
        return httpx.Response(200, json={"data": {
            "r0": {"g0": {"comments": {"nodes": []}}},
            "r1": {"g1": {"comments": {"nodes": [{"fullDatabaseId": "7"}]}}}}})  # fmt: skip

    router.post("/graphql").mock(side_effect=answer)
    app = Asked(Repo("acme", "app"), 1, "issue", None)
    web = Asked(Repo("acme", "web"), 2, "pull_request", "Y3Vyc29y")
    assert news(make_client(), [app, web, app]) == {app: "idle", web: "news"}
    (query,) = sent
    assert "r1: repository(owner: $o1, name: $n1) { g1: pullRequest(number: $i1)" in query["query"]
    assert query["variables"] == {"o0": "acme", "n0": "app", "i0": 1, "c0": None,
                                  "o1": "acme", "n1": "web", "i1": 2, "c1": "Y3Vyc29y"}  # fmt: skip


def test_a_batch_github_answers_with_no_data_raises_and_each_gate_reads_for_itself(
    hub: Hub, router: respx.Router, make_client: MakeClient
) -> None:
    import asyncio
    import json

    import httpx

    from zuke_gh.errors import GitHubError

    trigger, probes = waiting(hub, make_client, 2)
    answer = {"errors": [{"message": "Something went wrong while executing your query."}]}
    calls: list[str] = []

    def first_fails(request: httpx.Request) -> httpx.Response:
        sent = json.loads(request.content)
        calls.append(sent["query"])
        if "thread:" not in sent["query"]:  # the batched look fails; the Hub answers reads
            return httpx.Response(200, json=answer)
        return hub._graphql(request)

    router.post("/graphql").mock(side_effect=first_fails)
    shared: dict[str, Any] = {}
    with pytest.raises(GitHubError, match="Something went wrong"):
        asyncio.run(trigger.prefetch([p.context(LATER, shared) for p in probes]))
    hub.say(1, "maint", "/approve")
    assert isinstance(probes[0].check(trigger, LATER, shared), Satisfied)
    assert isinstance(probes[1].check(trigger, LATER, shared), NotYet)
    assert len(calls) == 3  # the batch, then each gate's own read
