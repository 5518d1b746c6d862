"""``github_workflow(...)``: a gate that dispatches a GitHub Actions workflow and waits for it.

Built on zuke's public trigger seam (:class:`~zuke._waits.WaitTrigger`); the
whole of ``docs/github.md`` describes it for users. The decisions that matter:

* **The marker is durable before the dispatch.** The first check writes
  ``{marker, dispatchedAt}`` to the gate's state and ``await ctx.persist()``
  *then* dispatches, so a process killed mid-dispatch leaves a record that
  says "dispatched, maybe": every later check, in any process, polls and never
  dispatches again. The price is the mirror case — a dispatch that never
  landed is reported when the discovery window ends, not at once.
* **The dispatch is never resent once it may have landed.** The client does
  not retry a POST after a 5xx or a read timeout (it may have landed). A
  dispatch GitHub certainly did not act on is owed, not made: one that never
  left the machine (connection refused, a name that does not resolve, a
  connect timeout) is retried within the client's budget, and past it — like
  a rate-limited one — undone, so a later check dispatches it (same marker).
* **Ask for the run id** (``return_run_details``); a server that refuses the
  key (an older GHES answers 400) gets the dispatch again without it, and the
  run is found by correlation (:mod:`zuke_gh._correlate`).
* **One poll per workflow per sweep** however many gates wait on it
  (:mod:`zuke_gh._workflow_api`).
* **A credential that cannot work fails the dispatch**, as a refused token
  does: an App key that does not load or sign, or a mint GitHub refused. The
  token was never sent, but it is not "owed" like a dispatch the network lost:
  the next check would fail the same way, and the run would sit "waiting"
  until its deadline. A mint that could not reach GitHub is still waited out.
* **A status GitHub has not documented keeps the gate waiting** (``status`` is
  a nullable string, not an enum): only ``completed`` ends it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Mapping
from typing import Any

from zuke import NotYet, Satisfied, WaitContext, WaitFailed, WaitTrigger
from zuke._clock import iso, parse_iso
from zuke_gh import _correlate as corr
from zuke_gh import _workflow_api as api
from zuke_gh._workflow_settings import (
    WorkflowJob,
    WorkflowResult,
    WorkflowSettings,
    WorkflowSpec,
    read_workflow_result,
)
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError, transient

__all__ = [
    "GitHubWorkflowTrigger",
    "WorkflowJob",
    "WorkflowResult",
    "WorkflowSettings",
    "WorkflowSpec",
    "github_workflow",
    "read_workflow_result",
]

WaitResult = NotYet | Satisfied | WaitFailed
_ENV_KEYS = ("GITHUB_API_URL", "GH_TOKEN", "GITHUB_TOKEN", "ZUKE_GH_APP_ID",
             "ZUKE_GH_APP_PRIVATE_KEY", "ZUKE_GH_APP_PRIVATE_KEY_FILE", "ZUKE_GH_APP_OWNER",
             "ZUKE_GH_APP_REPOSITORIES", "GITHUB_REPOSITORY")  # fmt: skip
#: clients made from the environment, by a hash of it: their ETag caches outlive one sweep
_ENV_CLIENTS: dict[str, GitHubClient] = {}


def github_workflow(configure: Callable[[WorkflowSettings], Any]) -> WaitTrigger:
    """A trigger that dispatches a workflow once and is satisfied when its run completes:
    ``github_workflow(lambda g: g.repo("acme/app").workflow("e2e.yml").ref("main"))``."""
    settings = WorkflowSettings()
    configure(settings)
    return GitHubWorkflowTrigger(settings.freeze())


def env_client() -> GitHubClient:
    """The client ``GitHubClient.from_env()`` makes, one per environment (by a hash)."""
    text = "\0".join(os.environ.get(k, "") for k in _ENV_KEYS)
    key = hashlib.sha256(text.encode()).hexdigest()
    client = _ENV_CLIENTS.get(key)
    if client is None:
        client = GitHubClient.from_env()
        _ENV_CLIENTS[key] = client
    return client


def sweep_client(
    factory: Callable[[], GitHubClient] | None, shared: dict[str, Any]
) -> GitHubClient:
    """A gate's client: the environment's, or its factory's, made once per sweep (``shared``)."""
    if factory is None:
        return env_client()
    key = f"zuke_gh.client {id(factory)}"
    found = shared.get(key)
    if isinstance(found, tuple) and found[0] is factory:
        client: GitHubClient = found[1]
        return client
    client = factory()
    shared[key] = (factory, client)
    return client


class GitHubWorkflowTrigger(WaitTrigger):
    """The trigger ``github_workflow`` returns (its state: see ``docs/github.md``)."""

    #: past the deadline, only a run that completed by then (its ``updated_at``) passes
    answers_as_of = True

    def __init__(self, spec: WorkflowSpec) -> None:
        self.spec = spec
        self.interval_ms = spec.poll_every_ms
        self._where = f"github_workflow {spec.target.slug} {spec.target.workflow}@{spec.ref}"

    @property
    def descriptor(self) -> str:
        return f"github:{self.spec.target.slug}:{self.spec.target.workflow}"

    def _client(self, shared: dict[str, Any]) -> GitHubClient:
        return sweep_client(self.spec.client, shared)

    async def check(self, ctx: WaitContext) -> WaitResult:
        state = ctx.state.get()
        if isinstance(state.get("result"), Mapping):
            return Satisfied(state["result"])  # completed earlier: no API call
        if not isinstance(state.get("marker"), str):
            if ctx.as_of_ms is not None:  # past the deadline: never dispatch now
                return NotYet(f"{self._where}: not dispatched by the gate's deadline")
            try:
                client = self._client(ctx.shared)
            except GitHubError as exc:  # an App key that cannot sign, a bad GITHUB_API_URL
                return WaitFailed(f"{self._where}: cannot dispatch: {exc}")
            return await self._dispatch(ctx, client)
        client = self._client(ctx.shared)
        try:
            return await self._poll(ctx, client, state)
        except GitHubError as exc:
            return self._poll_failed(ctx, state, exc)

    # -- dispatch ----------------------------------------------------------------------------

    async def _dispatch(self, ctx: WaitContext, client: GitHubClient) -> WaitResult:
        spec = self.spec
        marker = f"zuke:{ctx.run_id}:{ctx.target}"
        patch: dict[str, Any] = {"marker": marker, "dispatchedAt": ctx.now_ms}
        if spec.correlate == "created-window":
            try:  # what was there before: never mistaken for ours
                ids, now = await asyncio.to_thread(api.baseline, client, spec.target)
            except GitHubError as exc:
                if transient(exc) and not corr.credential_refused(exc):
                    return NotYet(f"{self._where}: could not list the runs before dispatching "
                                  f"({exc}); it dispatches at a later check")  # fmt: skip
                return WaitFailed(f"{self._where}: {exc}")
            patch.update(baselineIds=ids, githubDispatchedAt=now)
        ctx.state.set(patch)
        await ctx.persist()  # durable BEFORE the dispatch: a crash from here on re-polls
        inputs: dict[str, str] = dict(spec.inputs)
        if spec.correlate == "marker" or spec.marker_input_named:
            inputs[spec.marker_input] = marker
        call = api.dispatch
        try:
            body, now = await asyncio.to_thread(call, client, spec.target, spec.ref, inputs,
                                                details=True)  # fmt: skip
        except GitHubError as exc:
            if not corr.refuses_run_details(exc):
                return await self._dispatch_failed(ctx, exc)
            try:  # an older GHES refused the key and dispatched nothing: again, without it
                body, now = await asyncio.to_thread(call, client, spec.target, spec.ref, inputs,
                                                    details=False)  # fmt: skip
            except GitHubError as again:
                return await self._dispatch_failed(ctx, again)
        answered: dict[str, Any] = {"dispatchAnswered": True}
        if now is not None and "githubDispatchedAt" not in patch:
            answered["githubDispatchedAt"] = now  # GitHub's clock, which dates the runs
        run_id = body.get("workflow_run_id")
        if isinstance(run_id, int) and not isinstance(run_id, bool):
            url = body.get("html_url") if isinstance(body.get("html_url"), str) else ""
            answered.update(runId=run_id, runUrl=url or None)
            ctx.state.set(answered)
            return NotYet(f"{self._where}: dispatched; following run {url or run_id}")
        ctx.state.set(answered)
        return NotYet(f"{self._where}: dispatched; looking for its run ({spec.correlate})")

    async def _dispatch_failed(self, ctx: WaitContext, exc: GitHubError) -> WaitResult:
        if exc.unsent or exc.retry_at_ms is not None or exc.status == 429:
            # Never sent, or rate limited: GitHub did not act on it, so the dispatch is owed.
            undo = dict.fromkeys(("marker", "dispatchedAt", "githubDispatchedAt", "baselineIds"))
            ctx.state.set(undo)
            await ctx.persist()
            if corr.credential_refused(exc):  # owed, but no later check can make it
                return WaitFailed(f"{self._where}: cannot dispatch: {exc}")
            if exc.unsent:
                return NotYet(f"{self._where}: the dispatch never reached GitHub ({exc}); it is "
                              "tried again at the next check")  # fmt: skip
            when = f" after {iso(exc.retry_at_ms)}" if exc.retry_at_ms else ""
            return NotYet(f"{self._where}: the dispatch was rate limited; it is tried again at a "
                          f"later check{when}")  # fmt: skip
        if exc.status is None or exc.status >= 500:
            return NotYet(f"{self._where}: the dispatch's answer was lost ({exc}); it may "
                          "have landed, so the gate looks for the run, never dispatching "
                          "again")  # fmt: skip
        marker_input = self.spec.marker_input if (
            self.spec.correlate == "marker" or self.spec.marker_input_named) else None  # fmt: skip
        return WaitFailed(corr.dispatch_refused(self._where, exc, marker_input=marker_input))

    # -- polling -----------------------------------------------------------------------------

    async def _poll(
        self, ctx: WaitContext, client: GitHubClient, state: dict[str, Any]
    ) -> WaitResult:
        listing = api.listing_for(ctx.shared, client, self.spec.target)
        run_id = state.get("runId")
        if isinstance(run_id, int):
            run = await self._run_by_id(ctx, client, listing, run_id)
        else:
            found = await self._identify(ctx, listing, state)
            if not isinstance(found, Mapping):
                return found
            run = found
            ctx.state.set({"runId": api.run_id_of(run), "runUrl": corr.url_of(run)})
        return await self._judge(ctx, client, run)

    async def _run_by_id(
        self, ctx: WaitContext, client: GitHubClient, listing: api.RunListing, run_id: int
    ) -> Mapping[str, Any]:
        def reached(run: Mapping[str, Any]) -> bool:  # ids grow with time: ours is not older
            seen = api.run_id_of(run)
            return seen is not None and seen <= run_id

        runs = await api.walk(listing, reached)
        found = next((r for r in runs if api.run_id_of(r) == run_id), None)
        if found is not None:
            return found
        return await asyncio.to_thread(api.get_run, ctx.shared, client, self.spec.target, run_id)

    async def _identify(
        self, ctx: WaitContext, listing: api.RunListing, state: dict[str, Any]
    ) -> Mapping[str, Any] | WaitResult:
        """Our run by correlation, or why not (yet)."""
        gh_since = state.get("githubDispatchedAt")
        gh_since = gh_since if isinstance(gh_since, int) else None
        local_since = state.get("dispatchedAt")
        local_since = local_since if isinstance(local_since, int) else ctx.now_ms
        since = gh_since if gh_since is not None else local_since
        runs = await api.walk(listing, lambda r: corr.older_than(r, since))
        if self.spec.correlate == "marker":
            marked = corr.by_marker(runs, str(state["marker"]))
            if len(marked) > 1:
                return WaitFailed(corr.duplicate_marker(self._where, str(state["marker"]), marked))
            if marked:
                return marked[0]
        else:
            baseline = {i for i in state.get("baselineIds") or () if isinstance(i, int)}
            window = corr.in_window(
                runs, branch=self.spec.target.branch, since_ms=since,
                until_ms=since + self.spec.window_ms, baseline=baseline,
            )  # fmt: skip
            if len(window) > 1:
                return WaitFailed(corr.ambiguous(self._where, window))
            if window:
                return window[0]
        waited = self._waited_ms(ctx, state, listing.server_time_ms)
        if waited >= self.spec.discovery_ms:
            return WaitFailed(self._discovery_failure(state, waited))
        return NotYet(f"{self._where}: dispatched; no run identified yet ({waited // 1000} s of "
                      f"the {self.spec.discovery_ms // 1000} s discovery window)")  # fmt: skip

    def _waited_ms(self, ctx: WaitContext, state: Mapping[str, Any], gh_now: int | None) -> int:
        """Time since the persisted dispatch: by our clock, or GitHub's if that says more."""
        local = state.get("dispatchedAt")
        waited = ctx.now_ms - local if isinstance(local, int) else 0
        gh_since = state.get("githubDispatchedAt")
        if isinstance(gh_since, int) and gh_now is not None:
            waited = max(waited, gh_now - gh_since)
        return max(waited, 0)

    def _discovery_failure(self, state: Mapping[str, Any], waited_ms: int) -> str:
        return corr.discovery_guidance(
            where=self._where, mode=self.spec.correlate, marker_input=self.spec.marker_input,
            marker=str(state.get("marker")), waited_s=waited_ms // 1000,
            landed=state.get("dispatchAnswered") is True,
        )  # fmt: skip

    async def _judge(
        self, ctx: WaitContext, client: GitHubClient, run: Mapping[str, Any]
    ) -> WaitResult:
        status = run.get("status")
        if isinstance(status, str) and status in corr.WAITING:
            return NotYet(f"{self._where}: run {corr.url_of(run)} is {status}")
        if status != "completed":  # null or undocumented: never success, never a failure
            return NotYet(corr.unknown_status(self._where, run))
        done_at = parse_iso(str(run.get("updated_at")))
        if ctx.as_of_ms is not None and (done_at is None or done_at > ctx.as_of_ms):
            # The final check, past the deadline: a run's `updated_at` is no earlier than its
            # completion, so one at or before the deadline proves it completed in time.
            return NotYet(f"{self._where}: run {corr.url_of(run)} completed after the gate's "
                          "deadline (its updated_at)")  # fmt: skip
        run_id = api.run_id_of(run)
        jobs = [] if run_id is None else await asyncio.to_thread(
            api.list_jobs, client, self.spec.target, run_id)  # fmt: skip
        result = corr.result_of(run, jobs)
        ctx.state.set({"result": result})
        return Satisfied(result)

    def _poll_failed(self, ctx: WaitContext, state: dict[str, Any], exc: GitHubError) -> WaitResult:
        if not isinstance(state.get("runId"), int):
            waited = self._waited_ms(ctx, state, None)
            if waited >= self.spec.discovery_ms:  # past the window: no more waiting
                return WaitFailed(f"{self._discovery_failure(state, waited)} (the last poll "
                                  f"failed: {exc})")  # fmt: skip
        if transient(exc):
            return NotYet(f"{self._where}: GitHub did not answer the poll ({exc}); still waiting")
        raise exc  # not transient (401, 404): the gate stays waiting, the sweep reports it

    # -- timeout -----------------------------------------------------------------------------

    async def on_timeout(self, ctx: WaitContext) -> None:
        """With ``cancel_remote_on_timeout()``: ask GitHub to cancel the run (if identified)."""
        if not self.spec.cancel_remote:
            return
        found = await self._dispatched(ctx)
        if found is not None:
            client, run_id, _ = found
            await asyncio.to_thread(api.cancel, client, self.spec.target, run_id)

    async def on_cancel(self, ctx: WaitContext) -> str | None:
        """The run is cancelled while this gate waits: ask GitHub to cancel the workflow run
        it dispatched (``POST /actions/runs/{id}/cancel``: 202, or 409 when the run had
        finished already), unless ``keep_remote_on_cancel()``. One line for the run's events;
        ``None`` when nothing was dispatched. A failed request raises: the cancel records it
        and goes on."""
        state = ctx.state.get()
        if isinstance(state.get("result"), Mapping) or not isinstance(state.get("marker"), str):
            return None  # never dispatched (or already judged): nothing runs on GitHub for it
        if self.spec.keep_remote_on_cancel:
            return f"{self._where}: its workflow run was left running (keep_remote_on_cancel())"
        found = await self._dispatched(ctx)
        if found is None:
            return (f"{self._where}: dispatched, but its workflow run was not identified; "
                    "nothing was cancelled on GitHub")  # fmt: skip
        client, run_id, url = found
        status = await asyncio.to_thread(api.cancel, client, self.spec.target, run_id)
        shown = url or str(run_id)
        if status == 409:
            return f"{self._where}: workflow run {shown} had already finished (409); left as is"
        return f"{self._where}: asked GitHub to cancel workflow run {shown} ({status})"

    async def _dispatched(self, ctx: WaitContext) -> tuple[GitHubClient, int, str | None] | None:
        """The client, id and URL of the run this gate dispatched, identified as a poll would
        (``None``: nothing dispatched, or its run not identified)."""
        state = ctx.state.get()
        if isinstance(state.get("result"), Mapping) or not isinstance(state.get("marker"), str):
            return None
        client = self._client(ctx.shared)
        run_id = state.get("runId")
        url = state.get("runUrl") if isinstance(state.get("runUrl"), str) else None
        if not isinstance(run_id, int):
            listing = api.listing_for(ctx.shared, client, self.spec.target)
            found = await self._identify(ctx, listing, state)
            run_id = api.run_id_of(found) if isinstance(found, Mapping) else None
            url = corr.url_of(found) if isinstance(found, Mapping) else None
        return (client, run_id, url or None) if isinstance(run_id, int) else None
