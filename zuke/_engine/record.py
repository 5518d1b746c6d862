"""The initial run record of a fresh run: graph snapshot, parameters, origin, deadline."""

from __future__ import annotations

from collections.abc import Mapping

from zuke._clock import iso
from zuke._duration import parse_duration
from zuke._engine.plan import Plan
from zuke._provenance import build_origin
from zuke.state.records import ActorSource, GraphNode, RunRecord, TargetRecord


def ci_run_url(env: Mapping[str, str]) -> str | None:
    """The GitHub Actions run this process belongs to, when all three variables are set."""
    server, repo, run = (
        env.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID")
    )
    if server and repo and run:
        return f"{server.rstrip('/')}/{repo}/actions/runs/{run}"
    return None


def deadline_at(deadline: str | int | None, now_ms: int) -> str | None:
    """``Build.deadline()`` as an absolute stamp; a bad value raises :class:`DurationError`."""
    if deadline is None:
        return None
    return iso(now_ms + parse_duration(deadline, what="Build.deadline()"))


def _row(plan: Plan, name: str) -> TargetRecord:
    """A planned target's first row: its environment is known before it starts (a reporter
    shows a deployment ``queued`` from the run's creation)."""
    spec = plan.specs[name]
    if spec.environment is None:
        return TargetRecord()
    url = spec.environment_url if isinstance(spec.environment_url, str) else None
    return TargetRecord(environment=spec.environment, environment_url=url)


def new_record(
    *,
    run_id: str,
    build: str,
    plan: Plan,
    roots: list[str],
    params: Mapping[str, str],
    actor: str,
    actor_source: ActorSource = "local",
    now_ms: int,
    env: Mapping[str, str],
    deadline: str | None,
) -> RunRecord:
    stamp = iso(now_ms)
    return RunRecord(
        id=run_id,
        build=build,
        build_id=build_origin(env),
        root_target=roots[0],
        status="running",
        actor=actor,
        actor_source=actor_source,
        created_at=stamp,
        updated_at=stamp,
        graph=tuple(GraphNode(name, plan.hard[name]) for name in plan.order),
        params=dict(params),
        targets={name: _row(plan, name) for name in plan.order},
        deadline_at=deadline,
    )
