"""Which workflow run is ours, and what GitHub's answers mean — pure functions, no I/O.

``workflow_dispatch`` answers 204 with no run id on servers without
``return_run_details``, so the gate has to find its run:

* **marker** — the dispatch carries ``zuke:<run id>:<gate>`` as an input, the
  workflow echoes it as its whole ``run-name``, and the run whose
  ``display_title`` *equals* the marker is ours. Equality, not substring: a
  decorated ``run-name`` never matches, and the discovery window says why.
* **created-window** — for a workflow that cannot be changed: the
  ``workflow_dispatch`` run on the ref, created (by GitHub's clock, never the
  runner's) between the dispatch minus a skew allowance and the end of the
  discovery window, that was not already there before the dispatch. Two such
  runs are ambiguous: the gate fails and names both, rather than guess. The
  window's width is a setting (``created_window``, default 10 minutes).

Two runs carrying our marker are refused in the same way: someone dispatched
the workflow by hand with it. A re-run is not a second run: GitHub re-runs keep
the run's ``id`` and count ``run_attempt`` up (OpenAPI ``workflow-run``), so
runs are told apart by id.

The messages that tell a user how to fix the dispatched workflow live here too.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from zuke_gh._workflow_api import created_ms, run_id_of
from zuke_gh.errors import GitHubAppKeyError, GitHubError, transient

#: How far GitHub's ``created_at`` may precede the dispatch time we recorded.
SKEW_MS = 30_000
WAITING = frozenset({"queued", "in_progress", "waiting", "requested", "pending"})
_UNEXPECTED = re.compile(r"Unexpected inputs provided:\s*\[([^\]]*)\]")
_REQUIRED = re.compile(r"Required input '([^']+)' not provided")


def url_of(run: Mapping[str, Any]) -> str:
    """The run's page on GitHub (or its API URL, or its id)."""
    for key in ("html_url", "url"):
        value = run.get(key)
        if isinstance(value, str) and value:
            return value
    return f"run {run.get('id')}"


def by_marker(runs: Sequence[Mapping[str, Any]], marker: str) -> list[Mapping[str, Any]]:
    """The runs whose display title is exactly ``marker``, newest first, one per run id
    (a re-run keeps its id: it is the same run, not a second one)."""
    found: dict[object, Mapping[str, Any]] = {}
    for run in runs:
        if run.get("display_title") == marker:
            found.setdefault(run_id_of(run) or id(run), run)
    return list(found.values())


def in_window(
    runs: Sequence[Mapping[str, Any]],
    *,
    branch: str,
    since_ms: int,
    until_ms: int,
    baseline: Collection[int],
) -> list[Mapping[str, Any]]:
    """The dispatch runs on ``branch`` created in ``[since - skew, until]`` and not in
    ``baseline`` (what was there before the dispatch)."""
    found = []
    for run in runs:
        at = created_ms(run)
        if (
            at is not None
            and since_ms - SKEW_MS <= at <= until_ms
            and run.get("event", "workflow_dispatch") == "workflow_dispatch"
            and run.get("head_branch", branch) == branch
            and run_id_of(run) not in baseline
        ):
            found.append(run)
    return found


def older_than(run: Mapping[str, Any], since_ms: int | None) -> bool:
    """Whether ``run`` was created before ``since - skew`` (nothing older can be ours)."""
    at = created_ms(run)
    return since_ms is not None and at is not None and at < since_ms - SKEW_MS


def discovery_guidance(
    *, where: str, mode: str, marker_input: str, marker: str, waited_s: int, landed: bool
) -> str:
    """Why no run was found within the discovery window, and what to change."""
    head = f"{where}: no workflow run was identified within {waited_s} s of the dispatch"
    if not landed:
        head += " (the dispatch's answer never arrived: it may not have landed)"
    if mode == "created-window":
        return (
            f"{head}: no new workflow_dispatch run appeared on the ref in the window. Check the "
            'workflow\'s Actions page, or use .correlate("marker") with a workflow that declares '
            "the marker input"
        )
    return (
        f"{head}: no run's title equals the marker {marker!r}. The dispatched workflow must "
        f"declare the input `{marker_input}` under on.workflow_dispatch.inputs and make it the "
        f"whole run name (`run-name: ${{{{ inputs.{marker_input} }}}}`, equality, not "
        'substring); or use .correlate("created-window") for a workflow you cannot change'
    )


def named(runs: Sequence[Mapping[str, Any]]) -> str:
    """``run 12 (https://…), run 11 (https://…)``: each run's id and page."""
    return ", ".join(f"run {r.get('id')} ({url_of(r)})" for r in runs)


def ambiguous(where: str, runs: Sequence[Mapping[str, Any]]) -> str:
    return (
        f"{where}: created-window correlation is ambiguous: {len(runs)} workflow_dispatch runs "
        f"share the window: {named(runs)}; the gate will not guess. Dispatch this workflow from "
        'one place at a time, or use .correlate("marker") with a workflow that echoes the marker'
    )


def duplicate_marker(where: str, marker: str, runs: Sequence[Mapping[str, Any]]) -> str:
    return (
        f"{where}: {len(runs)} workflow runs carry this gate's marker {marker!r}: {named(runs)};"
        " the gate will not guess which is its own. Someone dispatched the workflow with the "
        "marker by hand: cancel the run that is not this release's on GitHub, then cancel or "
        "re-run the zuke release"
    )


def dispatch_refused(where: str, error: GitHubError, *, marker_input: str | None) -> str:
    """A 422 (or other refusal) of the dispatch, with the likely cause named."""
    detail = error.detail or str(error)
    unexpected = _UNEXPECTED.search(detail)
    if unexpected:
        names = [n.strip().strip('"') for n in unexpected.group(1).split(",") if n.strip()]
        if marker_input is not None and marker_input in names:
            return (
                f"{where}: GitHub refused the dispatch ({detail}): the workflow does not declare "
                f"the marker input {marker_input!r}. Add `{marker_input}: {{ required: false }}` "
                "under on.workflow_dispatch.inputs, or name the input it has with "
                '.marker_input("<name>"), or use .correlate("created-window")'
            )
        listed = ", ".join(repr(n) for n in names)
        return (
            f"{where}: GitHub refused the dispatch ({detail}): the workflow does not declare the "
            f"input(s) {listed}. Declare them under on.workflow_dispatch.inputs, or drop them "
            "from the gate's .inputs()"
        )
    required = _REQUIRED.search(detail)
    if required:
        name = required.group(1)
        return (
            f"{where}: GitHub refused the dispatch ({detail}): the workflow requires the input "
            f"{name!r}. Supply it from the gate with .input({name!r}, value)"
        )
    if "No ref found" in detail:
        return (
            f"{where}: GitHub refused the dispatch ({detail}): the ref does not exist in the "
            "repository. Check the gate's .ref()"
        )
    return f"{where}: GitHub refused the dispatch: {error}"


def refuses_run_details(error: GitHubError) -> bool:
    """An older GitHub Enterprise Server: 400 ``return_run_details is not a permitted key``."""
    return error.status in (400, 422) and "return_run_details" in (error.detail or str(error))


def credential_refused(error: GitHubError) -> bool:
    """A credential that cannot work: an App key that does not load or sign, or a token
    whose minting GitHub answered and refused (401 JWT, 404 not installed, 422 permissions
    not granted…): the request was never sent (``unsent``) yet GitHub answered. Not a rate
    limit, a 5xx or a network failure: no later check gets further."""
    if isinstance(error, GitHubAppKeyError):
        return True
    return error.unsent and error.status is not None and not transient(error)


def unknown_status(where: str, run: Mapping[str, Any]) -> str:
    """Why the gate still waits on a run whose status is null or undocumented."""
    status = run.get("status")
    seen = "no status (null)" if status is None else f"the status {status!r}"
    return (
        f"{where}: run {url_of(run)} has {seen}, which is not completed; the gate keeps "
        "waiting until it completes or the gate times out"
    )


def job_rows(jobs: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """``{name, conclusion, url}`` of each job (missing fields as empty strings)."""

    def text(job: Mapping[str, Any], key: str) -> str:
        value = job.get(key)
        return value if isinstance(value, str) else ""

    return [
        {"name": text(j, "name"), "conclusion": text(j, "conclusion"), "url": text(j, "html_url")}
        for j in jobs
    ]


def result_of(run: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the gate writes to its state when the run completed."""
    conclusion = run.get("conclusion")
    conclusion = conclusion if isinstance(conclusion, str) and conclusion else "unknown"
    return {
        "passed": conclusion == "success",
        "conclusion": conclusion,
        "run_id": run_id_of(run),
        "url": url_of(run),
        "jobs": job_rows(jobs),
    }
