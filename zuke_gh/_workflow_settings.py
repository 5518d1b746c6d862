"""The settings of a ``github_workflow`` gate, and how it ended: ``WorkflowResult``.

Settings are checked when the build loads (the gate's ``waits_for`` runs
then): a repository that is not ``owner/name``, a workflow or ref that breaks
git's name rules, a bad duration or correlation mode is a
:class:`~zuke.BuildDefinitionError` naming it, before anything is dispatched.
They see the build's parameters, never run state (they run before the run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from zuke import BuildDefinitionError
from zuke._duration import Duration, parse_duration
from zuke_gh import _workflow_api as api
from zuke_gh._paths import check_segment, repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

Correlation = Literal["marker", "created-window"]
ClientFactory = Callable[[], GitHubClient]
DEFAULT_MARKER_INPUT = "zuke_marker"
DEFAULT_DISCOVERY_MS = 60_000


@dataclass(frozen=True)
class WorkflowJob:
    name: str
    conclusion: str
    url: str


@dataclass(frozen=True)
class WorkflowResult:
    """How the dispatched run ended: ``passed`` only when it concluded ``success``."""

    passed: bool
    conclusion: str
    run_id: int | None
    url: str
    jobs: tuple[WorkflowJob, ...] = ()


def read_workflow_result(state: Any) -> WorkflowResult | None:
    """The gate's result from ``ctx.state_of("<gate>")`` (or its ``.get()`` mapping);
    ``None`` before the run completed. Malformed fields read as empty."""
    data = state.get() if callable(getattr(state, "get", None)) and not isinstance(
        state, Mapping
    ) else state  # fmt: skip
    raw = data.get("result") if isinstance(data, Mapping) else None
    if not isinstance(raw, Mapping):
        return None

    def text(m: Mapping[str, Any], key: str) -> str:
        value = m.get(key)
        return value if isinstance(value, str) else ""

    jobs = raw.get("jobs")
    rows = tuple(
        WorkflowJob(text(j, "name"), text(j, "conclusion"), text(j, "url"))
        for j in (jobs if isinstance(jobs, list) else [])
        if isinstance(j, Mapping)
    )
    run_id = raw.get("run_id")
    return WorkflowResult(
        passed=raw.get("passed") is True,
        conclusion=text(raw, "conclusion") or "unknown",
        run_id=run_id if isinstance(run_id, int) and not isinstance(run_id, bool) else None,
        url=text(raw, "url"),
        jobs=rows,
    )


@dataclass(frozen=True)
class WorkflowSpec:
    """The frozen settings of one ``github_workflow`` gate."""

    target: api.Target
    ref: str
    inputs: Mapping[str, str | int | float | bool]
    marker_input: str
    marker_input_named: bool
    correlate: Correlation
    discovery_ms: int
    poll_every_ms: int | None
    cancel_remote: bool
    client: ClientFactory | None = field(default=None, compare=False)


class WorkflowSettings:
    """What ``github_workflow(configure)`` hands ``configure``; every setting is checked here,
    at build load (a bad one is a :class:`~zuke.BuildDefinitionError` naming it)."""

    def __init__(self) -> None:
        self._repo: tuple[str, str] | None = None
        self._workflow: str | None = None
        self._ref = "main"
        self._inputs: dict[str, str | int | float | bool] = {}
        self._marker_input: str | None = None
        self._correlate: Correlation = "marker"
        self._discovery_ms = DEFAULT_DISCOVERY_MS
        self._poll_every_ms: int | None = None
        self._cancel_remote = False
        self._client: ClientFactory | None = None

    def repo(self, slug: str) -> WorkflowSettings:
        """The repository that has the workflow: ``"owner/name"``."""
        self._repo = _checked(lambda: repo_slug(slug))
        return self

    def workflow(self, file_or_id: str | int) -> WorkflowSettings:
        """The workflow's file name (``"e2e.yml"``) or numeric id."""
        value = str(file_or_id) if isinstance(file_or_id, int) else file_or_id
        if not isinstance(value, str):
            raise BuildDefinitionError(f"github_workflow: workflow() takes a file name or id, "
                                       f"got {file_or_id!r}")  # fmt: skip
        self._workflow = _checked(lambda: check_segment("workflow", value))
        return self

    def ref(self, name: str) -> WorkflowSettings:
        """The branch or tag to run the workflow on (default ``main``)."""
        if not isinstance(name, str):
            raise BuildDefinitionError(f"github_workflow: ref() takes a name, got {name!r}")
        self._ref = _checked(lambda: check_segment("ref", name, slashes=True))
        return self

    def inputs(self, values: Mapping[str, Any]) -> WorkflowSettings:
        """Inputs for the dispatch (strings, numbers or booleans); merged with earlier ones."""
        if not isinstance(values, Mapping):
            raise BuildDefinitionError(f"github_workflow: inputs() takes a mapping, got {values!r}")
        for name, value in values.items():
            self.input(name, value)
        return self

    def input(self, name: str, value: str | int | float | bool) -> WorkflowSettings:
        """One dispatch input."""
        if not isinstance(name, str) or not name.strip():
            raise BuildDefinitionError(f"github_workflow: an input needs a name, got {name!r}")
        if not isinstance(value, str | int | float | bool):
            raise BuildDefinitionError(
                f"github_workflow: input {name!r} must be a string, number or boolean "
                f"(GitHub's inputs are scalars), got {type(value).__name__}"
            )
        self._inputs[name] = value
        return self

    def marker_input(self, name: str) -> WorkflowSettings:
        """The input that carries the correlation marker (default ``zuke_marker``)."""
        if not isinstance(name, str) or not name.strip() or any(c.isspace() for c in name):
            raise BuildDefinitionError(f"github_workflow: marker_input() needs an input name, "
                                       f"got {name!r}")  # fmt: skip
        self._marker_input = name
        return self

    def correlate(self, mode: Correlation) -> WorkflowSettings:
        """``"marker"`` (default: the run-name equals the marker) or ``"created-window"``."""
        if mode not in ("marker", "created-window"):
            raise BuildDefinitionError(
                f'github_workflow: correlate() takes "marker" or "created-window", got {mode!r}'
            )
        self._correlate = mode
        return self

    def discovery_timeout(self, duration: Duration) -> WorkflowSettings:
        """How long after the dispatch the run must be identified (default 1 minute)."""
        self._discovery_ms = parse_duration(duration, what="github_workflow discovery_timeout()")
        return self

    def poll_every(self, duration: Duration) -> WorkflowSettings:
        """Ask GitHub no more often than this (a sweep between polls skips the gate)."""
        self._poll_every_ms = parse_duration(duration, what="github_workflow poll_every()")
        return self

    def cancel_remote_on_timeout(self, enabled: bool = True) -> WorkflowSettings:
        """When the gate times out, ask GitHub to cancel the run before the disposition runs."""
        self._cancel_remote = bool(enabled)
        return self

    def client(self, factory: ClientFactory) -> WorkflowSettings:
        """Make the GitHub client with ``factory`` (a test seam; default: from the environment)."""
        if not callable(factory):
            raise BuildDefinitionError(f"github_workflow: client() takes a callable returning a "
                                       f"GitHubClient, got {factory!r}")  # fmt: skip
        self._client = factory
        return self

    def freeze(self) -> WorkflowSpec:
        if self._repo is None or self._workflow is None:
            raise BuildDefinitionError(
                "github_workflow: set the repository and the workflow: "
                'g.repo("owner/name").workflow("e2e.yml")'
            )
        marker = self._marker_input or DEFAULT_MARKER_INPUT
        if marker in self._inputs and (self._correlate == "marker" or self._marker_input):
            raise BuildDefinitionError(
                f"github_workflow: the input {marker!r} carries the marker; name another "
                "with .marker_input(...)"
            )
        owner, repo = self._repo
        branch = self._ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
        return WorkflowSpec(
            api.Target(owner, repo, self._workflow, branch), self._ref, dict(self._inputs),
            marker, self._marker_input is not None, self._correlate, self._discovery_ms,
            self._poll_every_ms, self._cancel_remote, self._client,
        )  # fmt: skip


def _checked(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except GitHubError as exc:
        raise BuildDefinitionError(f"github_workflow: {exc}") from None
