"""``github_deployments``: a run's environments mirrored to GitHub's Deployments (issue 26 §3).

``class Release(Build): def reporters(self): return [github_deployments(lambda d:
d.repo("acme/app"))]`` — then each environment a run deploys to (``t.environment(...)``) gets
one deployment on GitHub (ref: the run's commit; ``auto_merge: false``; ``required_contexts:
[]`` unless configured; the run id in its payload), and its statuses follow the target
(:mod:`zuke_gh._deploy_plan`: ``queued`` → ``pending`` at a gate → ``in_progress`` →
``success`` / ``failure`` / ``error``; ``inactive`` once cancelled or rolled back).

Exactly one deployment per run and environment, whichever process reports: the intent
(environment, commit) is remembered in the run's record *before* the POST; a process that
finds an intent without an id (the answer was lost, or the process died) lists the
environment's deployments for that commit and adopts only one **zuke's own identity** created
(:func:`zuke_gh._identity.identity`) whose payload names this run — anyone may create a
deployment with a copied payload. Only if none is found is it created again.

Every status is a write: it is sent only when it differs from the last one sent (remembered
in the record), and only if the process's write budget affords it
(:meth:`GitHubClient.reserve_writes`); otherwise it is deferred, not dropped — a sweep reports
every waiting run again and sends it then. A failed write raises to the reporter seam, which
says it in one line and never fails the release.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from zuke import BuildDefinitionError, ReportContext, RunReport, RunReporter
from zuke.state.records import RunRecord
from zuke_gh._deploy_plan import Wanted, fit, wanted
from zuke_gh._identity import identity, same_login
from zuke_gh._paths import repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

ClientFactory = Callable[[], GitHubClient]
DEPLOYMENTS = "/repos/{owner}/{repo}/deployments"
STATUSES = "/repos/{owner}/{repo}/deployments/{deployment_id}/statuses"
#: the key of the payload's object that marks a deployment as this run's
PAYLOAD_KEY = "zuke"


@dataclass(frozen=True)
class DeploymentSpec:
    """The frozen settings of one ``github_deployments`` reporter."""

    repo: tuple[str, str] | None
    required_contexts: tuple[str, ...] = ()
    client: ClientFactory | None = field(default=None, compare=False)


class DeploymentSettings:
    """What ``github_deployments(configure)`` hands ``configure`` (checked at once)."""

    def __init__(self) -> None:
        self._repo: tuple[str, str] | None = None
        self._contexts: tuple[str, ...] = ()
        self._client: ClientFactory | None = None

    def repo(self, slug: str) -> DeploymentSettings:
        """The repository whose Deployments show the run (default ``GITHUB_REPOSITORY``)."""
        try:
            self._repo = repo_slug(slug)
        except GitHubError as exc:
            raise BuildDefinitionError(f"github_deployments: {exc}") from None
        return self

    def required_contexts(self, *names: str) -> DeploymentSettings:
        """Commit status checks GitHub must see pass on the commit before it creates the
        deployment (default none: zuke's gates already decided)."""
        if not all(isinstance(n, str) and n for n in names):
            raise BuildDefinitionError(
                f"github_deployments: required_contexts() takes check names, got {names!r}"
            )
        self._contexts = tuple(names)
        return self

    def client(self, factory: ClientFactory) -> DeploymentSettings:
        """Make the GitHub client with ``factory`` (a test seam; default: from the environment)."""
        if not callable(factory):
            raise BuildDefinitionError("github_deployments: client() takes a callable "
                                       f"returning a GitHubClient, got {factory!r}")  # fmt: skip
        self._client = factory
        return self

    def freeze(self) -> DeploymentSpec:
        return DeploymentSpec(self._repo, self._contexts, self._client)


def github_deployments(
    configure: Callable[[DeploymentSettings], Any] | None = None,
) -> GitHubDeployments:
    """A reporter mirroring each run's environments to GitHub's Deployments:
    ``github_deployments(lambda d: d.repo("acme/app"))`` (see docs/github.md, Deployments)."""
    settings = DeploymentSettings()
    if configure is not None:
        configure(settings)
    return GitHubDeployments(settings.freeze())


class GitHubDeployments(RunReporter):
    """The reporter ``github_deployments`` returns; its memory: ``report:github-deployments``
    events keyed ``deployment:<environment>`` (``sha``, then ``id``) and ``status:<environment>``
    (the last status sent)."""

    name = "github-deployments"

    def __init__(self, spec: DeploymentSpec) -> None:
        self.spec = spec
        self._clients: dict[str, GitHubClient] = {}

    def _client(self) -> GitHubClient:
        if self.spec.client is not None:
            found = self._clients.get("factory")
            if found is None:
                found = self._clients["factory"] = self.spec.client()
            return found
        from zuke_gh.workflow import env_client

        return env_client()

    def _repo(self, ctx: ReportContext) -> tuple[str, str]:
        if self.spec.repo is not None:
            return self.spec.repo
        slug = ctx.env.get("GITHUB_REPOSITORY") or os.environ.get("GITHUB_REPOSITORY", "")
        try:
            return repo_slug(slug)
        except GitHubError:
            raise GitHubError("github_deployments: no repository: set d.repo('owner/name') or "
                              "GITHUB_REPOSITORY") from None  # fmt: skip

    async def report(self, report: RunReport, ctx: ReportContext) -> None:
        record = report.record
        if report.kind == "created" and any(t.environment for t in record.targets.values()):
            sha = ctx.env.get("GITHUB_SHA")
            if sha and ctx.recall("commit") is None:  # the run's commit, for ever
                await ctx.remember("commit", {"sha": sha}, note=f"commit {sha[:12]}")
        todo = wanted(record, ctx.redact)
        if not todo:
            return
        deferred = 0
        for want in todo:
            if not await self._sync(record, want, ctx):
                deferred += 1
        if deferred:
            ctx.warn(f"zuke: github-deployments: {deferred} deployment status(es) of run "
                     f"{record.id} deferred: GitHub's write budget is spent; the next sweep "
                     "sends them")  # fmt: skip

    async def _sync(self, record: RunRecord, want: Wanted, ctx: ReportContext) -> bool:
        """Bring one environment's deployment to ``want``; ``False``: deferred (budget)."""
        last = ctx.recall(f"status:{want.environment}")
        url = want.environment_url or ""
        if last is not None and (
            last.get("state"),
            last.get("description"),
            last.get("url", ""),
        ) == (want.state, want.description, url):
            return True  # already shown: no request at all  # fmt: skip
        client = self._client()
        known = ctx.recall(f"deployment:{want.environment}")
        needs = 1 if known is not None and known.get("id") else 2
        if not client.reserve_writes(needs):
            return False
        deployment = await self._deployment(client, record, want, known, ctx)
        if deployment is None:
            return True  # the run never had a commit to deploy: said once, nothing to show
        body: dict[str, Any] = {"state": want.state, "description": want.description}
        if want.environment_url:
            body["environment_url"] = want.environment_url
        if ctx.job_url:
            body["log_url"] = ctx.job_url
        owner, repo = self._repo(ctx)
        await asyncio.to_thread(client.post, STATUSES, owner=owner, repo=repo,
                                deployment_id=deployment, json=body)  # fmt: skip
        await ctx.remember(
            f"status:{want.environment}",
            {"state": want.state, "description": want.description, "url": url},
            note=f"deployment {deployment} ({want.environment}): {want.state}",
        )
        return True

    async def _deployment(
        self,
        client: GitHubClient,
        record: RunRecord,
        want: Wanted,
        known: Mapping[str, str] | None,
        ctx: ReportContext,
    ) -> int | None:
        """The id of this run's deployment to ``want.environment``: remembered, adopted after
        a lost answer, or created (its intent remembered first)."""
        if known is not None and known.get("id"):
            return int(known["id"])
        owner, repo = self._repo(ctx)
        key = f"deployment:{want.environment}"
        if known is not None:  # an intent without an id: the answer was lost, or we died
            sha = known.get("sha", "")
            found = await asyncio.to_thread(self._adopt, client, owner, repo, sha, want, record)
            if found is not None:
                note = f"deployment {found} ({want.environment}) adopted"
                await ctx.remember(key, {"sha": sha, "id": str(found)}, note=note)
                return found
        else:
            commit = ctx.recall("commit")
            sha = (commit or {}).get("sha") or ctx.env.get("GITHUB_SHA", "")
            if not sha:
                ctx.warn(f"zuke: github-deployments: run {record.id} has no commit (GITHUB_SHA "
                         "was not set where it started): no deployment is created")  # fmt: skip
                return None
            await ctx.remember(key, {"sha": sha},
                               note=f"deployment intent ({want.environment})")  # fmt: skip
        body = {
            "ref": sha, "environment": want.environment, "auto_merge": False,
            "required_contexts": list(self.spec.required_contexts), "task": "deploy",
            "payload": {PAYLOAD_KEY: {"run": record.id, "build": record.build,
                                      "target": want.target}},
            "description": fit(f"zuke run {record.id} ({record.build})", ctx.redact),
        }  # fmt: skip
        made = await asyncio.to_thread(client.post, DEPLOYMENTS, owner=owner, repo=repo,
                                       json=body, idempotent=False)  # fmt: skip
        made_id = int(made.body["id"])
        await ctx.remember(key, {"sha": sha, "id": str(made_id)},
                           note=f"deployment {made_id} ({want.environment})")  # fmt: skip
        return made_id

    def _adopt(self, client: GitHubClient, owner: str, repo: str, sha: str, want: Wanted,
               record: RunRecord) -> int | None:  # fmt: skip
        """This run's deployment to the environment, if zuke's identity created one (docs "List
        deployments": filters ``sha`` and ``environment``, newest first)."""
        me = identity(client)
        params = {"environment": want.environment, **({"sha": sha} if sha else {})}
        for item in client.paginate(DEPLOYMENTS, owner=owner, repo=repo, params=params,
                                    max_pages=3):  # fmt: skip
            creator = (item.get("creator") or {}).get("login")
            payload = item.get("payload")
            mark = payload.get(PAYLOAD_KEY) if isinstance(payload, dict) else None
            if same_login(creator, me) and isinstance(mark, dict) and mark.get("run") == record.id:
                return int(item["id"])
        return None


__all__ = ["DeploymentSettings", "DeploymentSpec", "GitHubDeployments", "github_deployments"]
