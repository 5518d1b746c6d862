"""The settings of a ``github_workflow`` gate, and how it ended: ``WorkflowResult``.

Settings are checked when the build loads (the gate's ``waits_for`` runs
then): a repository that is not ``owner/name``, a workflow or ref that breaks
git's name rules, a bad duration or correlation mode, an input GitHub would
refuse (not a scalar, or one too many) is a :class:`~zuke.BuildDefinitionError`
naming it, before anything is dispatched. They see the build's parameters,
never run state (they run before the run).

**Inputs are strings.** GitHub's dispatch takes ``inputs`` as an object of
strings and refuses a JSON number or boolean with a 422 (return-dispatch#197),
so values become strings here, by one rule: ``True``/``False`` become
``"true"``/``"false"`` (what a ``type: boolean`` input reads), numbers
``str(value)``, ``None`` leaves the input out (the workflow's default applies);
a mapping, a list or anything else is refused: pass ``json.dumps(value)`` and
``fromJSON`` it in the workflow. **At most 25 inputs on github.com, 10 on GHES
3.17-3.19**, the marker input included (``docs/github.md``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from zuke import BuildDefinitionError
from zuke._duration import Duration, parse_duration
from zuke_gh import _workflow_api as api
from zuke_gh._paths import check_segment, repo_slug
from zuke_gh.client import GitHubClient
from zuke_gh.errors import GitHubError

Correlation = Literal["marker", "created-window"]
ClientFactory = Callable[[], GitHubClient]
DEFAULT_MARKER_INPUT = "zuke_marker"
#: How long after the dispatch the run must be identified, and (created-window) how late its
#: ``created_at`` may be: 10 minutes, because runs appear minutes late under load.
DEFAULT_DISCOVERY_MS = 600_000
#: Dispatch inputs GitHub accepts (OpenAPI ``maxProperties``): github.com, and GHES 3.17-3.19.
GITHUB_COM_INPUTS = 25
GHES_INPUTS = 10


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
    inputs: Mapping[str, str]
    marker_input: str
    marker_input_named: bool
    correlate: Correlation
    discovery_ms: int
    #: created-window: a run created more than this after the dispatch is not ours
    window_ms: int
    poll_every_ms: int | None
    cancel_remote: bool
    client: ClientFactory | None = field(default=None, compare=False)
    #: ``zuke cancel`` leaves the dispatched run running (``keep_remote_on_cancel()``)
    keep_remote_on_cancel: bool = False


class WorkflowSettings:
    """What ``github_workflow(configure)`` hands ``configure``; every setting is checked here,
    at build load (a bad one is a :class:`~zuke.BuildDefinitionError` naming it)."""

    def __init__(self) -> None:
        self._repo: tuple[str, str] | None = None
        self._workflow: str | None = None
        self._ref = "main"
        self._inputs: dict[str, str] = {}
        self._input_limit: int | None = None
        self._marker_input: str | None = None
        self._correlate: Correlation = "marker"
        self._discovery_ms = DEFAULT_DISCOVERY_MS
        self._discovery_set = False
        self._window_ms: int | None = None
        self._poll_every_ms: int | None = None
        self._cancel_remote = False
        self._keep_remote_on_cancel = False
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
        """Inputs for the dispatch, merged with earlier ones; each as :meth:`input` converts it."""
        if not isinstance(values, Mapping):
            raise BuildDefinitionError(f"github_workflow: inputs() takes a mapping, got {values!r}")
        for name, value in values.items():
            self.input(name, value)
        return self

    def input(self, name: str, value: str | int | float | bool | None) -> WorkflowSettings:
        """One dispatch input, sent as a string: booleans as ``"true"``/``"false"``, numbers
        by ``str()``; ``None`` leaves it out (the workflow's default applies)."""
        if not isinstance(name, str) or not name.strip():
            raise BuildDefinitionError(f"github_workflow: an input needs a name, got {name!r}")
        if value is None:
            self._inputs.pop(name, None)
            return self
        self._inputs[name] = input_text(name, value)
        return self

    def input_limit(self, count: int) -> WorkflowSettings:
        """How many inputs the server accepts, the marker's included (default: 25 on
        github.com, 10 elsewhere: GHES 3.17-3.19 accept 10). At most 25."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 25:
            raise BuildDefinitionError(f"github_workflow: input_limit() takes 1 to "
                                       f"{GITHUB_COM_INPUTS}, got {count!r}")  # fmt: skip
        self._input_limit = count
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
        """How long after the dispatch the run must be identified (default 10 minutes)."""
        self._discovery_ms = parse_duration(duration, what="github_workflow discovery_timeout()")
        self._discovery_set = True
        return self

    def created_window(self, duration: Duration) -> WorkflowSettings:
        """created-window: how long after the dispatch (GitHub's clock) a run may be created
        and still be ours (default: the discovery timeout, 10 minutes)."""
        self._window_ms = parse_duration(duration, what="github_workflow created_window()")
        return self

    def poll_every(self, duration: Duration) -> WorkflowSettings:
        """Ask GitHub no more often than this (a sweep between polls skips the gate)."""
        self._poll_every_ms = parse_duration(duration, what="github_workflow poll_every()")
        return self

    def cancel_remote_on_timeout(self, enabled: bool = True) -> WorkflowSettings:
        """When the gate times out, ask GitHub to cancel the run before the disposition runs."""
        self._cancel_remote = bool(enabled)
        return self

    def keep_remote_on_cancel(self, enabled: bool = True) -> WorkflowSettings:
        """When the run is cancelled while the gate waits (``zuke cancel``, Ctrl-C, a
        ``"cancel-run"`` disposition), leave the dispatched workflow run running; by default
        zuke asks GitHub to cancel it."""
        self._keep_remote_on_cancel = bool(enabled)
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
        sends_marker = self._correlate == "marker" or self._marker_input is not None
        self._check_count(marker if sends_marker else None)
        discovery, window = self._discovery_ms, self._window_ms
        if window is None:
            window = discovery
        elif window > discovery:
            if self._discovery_set:
                raise BuildDefinitionError(
                    f"github_workflow: created_window() ({window // 1000} s) is longer than "
                    f"discovery_timeout() ({discovery // 1000} s): a run created that late is "
                    "never looked for. Lengthen the discovery timeout too"
                )
            discovery = window  # the discovery follows a longer window
        owner, repo = self._repo
        branch = self._ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
        return WorkflowSpec(
            api.Target(owner, repo, self._workflow, branch), self._ref, dict(self._inputs),
            marker, self._marker_input is not None, self._correlate, discovery, window,
            self._poll_every_ms, self._cancel_remote, self._client,
            self._keep_remote_on_cancel,
        )  # fmt: skip

    def _check_count(self, marker: str | None) -> None:
        count = len(self._inputs) + (marker is not None)
        limit, server = default_input_limit(os.environ)
        if self._input_limit is not None:
            limit, server = self._input_limit, "the server (.input_limit())"
        if count <= limit:
            return
        plus = f" plus the marker input {marker!r}" if marker is not None else ""
        newer = "; a server that accepts more: .input_limit(n)" if self._input_limit is None and (
            limit < GITHUB_COM_INPUTS) else ""  # fmt: skip
        raise BuildDefinitionError(
            f"github_workflow: {count} dispatch inputs ({len(self._inputs)} from .inputs(){plus})"
            f" is more than the {limit} {server} accepts: drop some, or pass several as one "
            f"JSON string (fromJSON in the workflow){newer}"
        )


def input_text(name: str, value: Any) -> str:
    """A dispatch input as the string GitHub takes (the rule in the module docstring)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"  # what a `type: boolean` input compares to
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return str(value)
    what = "a non-finite float" if isinstance(value, float) else f"a {type(value).__name__}"
    raise BuildDefinitionError(
        f"github_workflow: input {name!r} is {what}: GitHub's dispatch inputs are strings. Pass "
        "a string, number, boolean or None (left out), or json.dumps(value) and fromJSON it in "
        "the workflow"
    )


def default_input_limit(env: Mapping[str, str]) -> tuple[int, str]:
    """The inputs the API in ``GITHUB_API_URL`` accepts, and its name for messages: 25 on
    github.com (and GHE.com); anywhere else 10, GHES 3.17-3.19's limit (the strict one)."""
    url = env.get("GITHUB_API_URL", "").strip() or "https://api.github.com"
    host = (urlsplit(url).hostname or "").lower()
    if host == "api.github.com" or host.endswith(".ghe.com"):
        return GITHUB_COM_INPUTS, "github.com"
    return GHES_INPUTS, f"GitHub Enterprise Server 3.17-3.19 ({host or url}, not api.github.com)"


def _checked(make: Callable[[], Any]) -> Any:
    try:
        return make()
    except GitHubError as exc:
        raise BuildDefinitionError(f"github_workflow: {exc}") from None
