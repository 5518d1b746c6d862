"""Shared by the branch store's tests: a store on a fake GitHub, and counting what it cost."""

from __future__ import annotations

from typing import Any

from fixtures.fake_github.control import FakeControl
from zuke_gh import GitHubClient, RetryPolicy
from zuke_gh.branch_store import GitHubBranchStateStore

REPO = "acme/app"
BRANCH = "zuke-state"
#: The fake's settings that lift GitHub's rate and write limits (for suites that write a lot).
UNLIMITED = {"rate_limit": 10**9, "writes_per_minute": 10**9, "writes_per_hour": 10**9}


def branch_store(
    fake: FakeControl, *, branch: str = BRANCH, retry: RetryPolicy | None = None, **options: Any
) -> GitHubBranchStateStore:
    client = GitHubClient(token=fake.token, base_url=fake.url, retry=retry)
    return GitHubBranchStateStore(client, REPO, branch=branch, **options)


class Cost:
    """API requests (all, and those a 304 answered) and commits since the last ``take``."""

    def __init__(self, fake: FakeControl) -> None:
        self.fake = fake
        fake.reset_stats()

    def take(self) -> tuple[int, int, int]:
        """(requests, of which 304, commits) since the last call."""
        stats = self.fake.stats()
        self.fake.reset_stats()
        return int(stats["requests"]), int(stats["not_modified"]), int(stats["commits"])


def add_main_branch(fake: FakeControl, repo: str = REPO) -> None:
    """Make sure the repository has a ``main`` branch, as a real one has (the fake's
    ``add_repo`` seeds one with a README unless made ``empty``)."""
    if fake.head(repo, "main") is None:
        fake.commit_files(repo, "main", {"README.md": "# app\n"}, "Initial commit")
    fake.reset_stats()
