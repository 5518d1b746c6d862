"""GitHub integration for zuke.

* :class:`GitHubClient` — the one synchronous REST/GraphQL caller: validated
  path templates, retries inside a budget, ETags, tokens that never leak
  (``zuke_gh/client.py``; ``docs/github-client.md``).
* :class:`AppTokenSource` — GitHub App installation tokens for the client
  (``zuke_gh/app_token.py``).
* :func:`github_workflow` — a gate that dispatches a workflow and waits for its
  run; :func:`read_workflow_result` reads how it ended (``zuke_gh/workflow.py``;
  ``docs/github.md``).

* :func:`github_approval` — a gate that asks for approval in an issue and counts
  ``/approve`` from users with a role; :func:`read_approval` reads the decision
  (``zuke_gh/approval.py``; ``docs/github.md``, "Approvals").

* :func:`github_deployments` — a :class:`zuke.RunReporter` mirroring each run's environments
  (``t.environment(...)``) to GitHub's Deployments (``zuke_gh/deployments.py``;
  ``docs/github.md``, "Deployments").

* :class:`GitHubBranchStateStore` — zuke's run records and locks as files on a
  branch of the repository (``ZUKE_STATE=github://OWNER/REPO?branch=zuke-state``;
  ``zuke_gh/branch_store.py``; ``docs/github-state.md``).

This package depends
on :mod:`zuke`; :mod:`zuke` never imports it. ``import zuke_gh`` does not
import ``cryptography`` (only an App that signs does).
"""

from zuke_gh._jwt import app_jwt
from zuke_gh._paths import repo_slug
from zuke_gh._response import GitHubResponse, StaticToken, TokenSource
from zuke_gh._retry import RetryPolicy
from zuke_gh.app_token import AppCredentials, AppTokenSource, InstallationToken
from zuke_gh.approval import Approval, Approver, github_approval, read_approval
from zuke_gh.branch_store import GitHubBranchStateStore
from zuke_gh.client import GitHubClient
from zuke_gh.deployments import DeploymentSettings, GitHubDeployments, github_deployments
from zuke_gh.errors import GitHubAppKeyError, GitHubError, GitHubPathError
from zuke_gh.workflow import (
    GitHubWorkflowTrigger,
    WorkflowJob,
    WorkflowResult,
    WorkflowSettings,
    github_workflow,
    read_workflow_result,
)

__all__ = [
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
