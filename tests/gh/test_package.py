"""The package's surface: the exported names, and what ``import zuke_gh`` loads."""

from __future__ import annotations

import subprocess
import sys

import zuke_gh


def test_the_exported_names_are_pinned() -> None:
    assert zuke_gh.__all__ == [
        "AppCredentials",
        "AppTokenSource",
        "Approval",
        "Approver",
        "DeploymentSettings",
        "GitHubAppKeyError",
        "GitHubBranchStateStore",
        "GitHubClient",
        "GitHubDeployments",
        "GitHubError",
        "GitHubPathError",
        "GitHubResponse",
        "GitHubWorkflowTrigger",
        "InstallationToken",
        "RetryPolicy",
        "StaticToken",
        "TokenSource",
        "WorkflowJob",
        "WorkflowResult",
        "WorkflowSettings",
        "app_jwt",
        "github_approval",
        "github_deployments",
        "github_workflow",
        "read_approval",
        "read_workflow_result",
        "repo_slug",
    ]
    assert all(hasattr(zuke_gh, name) for name in zuke_gh.__all__)


def test_importing_zuke_gh_does_not_load_cryptography() -> None:
    probe = "import sys, zuke_gh; print('cryptography' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_zuke_gh_error_is_a_zuke_error() -> None:
    from zuke import ZukeError

    for name in ("GitHubError", "GitHubPathError", "GitHubAppKeyError"):
        assert issubclass(getattr(zuke_gh, name), ZukeError)
