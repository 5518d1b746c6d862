"""The store contract suite against ``GitHubBranchStateStore`` on the fake GitHub.

One fake per module, on a manual clock: ``lapse`` moves *GitHub's* clock (the
``Date`` header the store judges expiry by), never ours. The Date header has
whole seconds and the store grants a claim until ``Date + 1 s + ttl``, so a
lapse moves the fake's clock by the TTL plus two seconds. Racers get their own
store and client (their own view of the branch and their own connections), so
the races are decided by the fake's compare-and-swap on the branch head. The
suite writes far more than GitHub's 80 commits a minute, so the fake's write
limits are lifted here (the write budget has its own tests).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fixtures.fake_github import FakeGitHub
from tests.gh.branch_support import REPO, UNLIMITED, branch_store
from zuke._clock import ManualClock
from zuke.state._protocol import StateStore
from zuke.testing.store_contract import StateStoreContract
from zuke_gh.branch_store import GitHubBranchStateStore


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub.start(clock=ManualClock(), repos=[REPO], **UNLIMITED) as gh:
        yield gh


class TestGitHubBranchStoreContract(StateStoreContract):
    racers = 6

    @pytest.fixture
    def store(self, fake: FakeGitHub) -> Iterator[GitHubBranchStateStore]:
        self._fake = fake
        self._extra: list[GitHubBranchStateStore] = []
        store = branch_store(fake)
        yield store
        store.close()
        for other in self._extra:
            other.close()

    def concurrent_store(self, store: StateStore, index: int) -> StateStore:
        other = branch_store(self._fake)
        self._extra.append(other)
        return other

    def lapse(self, store: StateStore, ttl_ms: int) -> None:
        self._fake.advance_clock(ms=ttl_ms + 2_000)
