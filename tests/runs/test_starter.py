"""Who started a run is kept for ever: no resume, sweep, reap, timeout, cancel or walk
rewrites the record's ``actor``; each of them records its own actor in its event; ``ctx.actor``
is the starter in every process and ``ctx.resumed_by`` this process's actor; every
``WaitContext`` carries both, the starter's source and the run's redactor."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from tests.runs.support import HOUR, Harness
from zuke import (
    Build,
    LockAcquired,
    LockHolder,
    NotYet,
    Satisfied,
    WaitContext,
    WaitTrigger,
    _provenance,
    parameter,
    target,
)
from zuke._clock import ManualClock
from zuke._target import TargetBuilder
from zuke.runs.cancel import cancel_run
from zuke.state.memory import MemoryStateStore
from zuke.state.records import RunDelta
from zuke.state.update import update_run
from zuke.state.wire import dumps_record, loads_record, parse_record, record_to_json

STARTER = "alice"
TOKEN = "s3cr3t-T0ken/+&'x"


class Recorder(WaitTrigger):
    """Satisfied once ``open`` is set; keeps every context it was asked with."""

    def __init__(self) -> None:
        self.open = False
        self.seen: list[dict[str, Any]] = []
        self.timed_out: list[dict[str, Any]] = []

    @property
    def descriptor(self) -> str:
        return "signal:go"  # a signal gate as the record sees it: `zuke resume --signal go`

    def _keep(self, ctx: WaitContext) -> dict[str, Any]:
        return {
            "actor": ctx.actor,
            "source": ctx.actor_source,
            "resumed_by": ctx.resumed_by,
            "params": dict(ctx.params),
            "redacted": ctx.redact(f"token={TOKEN}"),
        }

    def signal_name(self) -> str:
        return "go"

    def check(self, ctx: WaitContext) -> Satisfied | NotYet:
        self.seen.append(self._keep(ctx))
        return Satisfied() if self.open or "go" in ctx.signals else NotYet("not yet")

    async def on_timeout(self, ctx: WaitContext) -> None:
        self.timed_out.append(self._keep(ctx))


def by(ctx: Any) -> str | None:
    """``ctx.resumed_by`` (``None`` where it does not exist: the test fails, it does not raise)."""
    return getattr(ctx, "resumed_by", None)


def build(
    store: MemoryStateStore, trigger: Recorder, calls: list[Any], *, rollback: bool = False
) -> type[Build]:
    """``deploy → approve (gate) → promote`` (locked); ``rollback`` outside the graph."""

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.on_cancel(self.undeploy).executes(  # type: ignore[attr-defined]
            lambda ctx: calls.append(("deploy", ctx.actor, by(ctx)))
        )

    def approve(self: Build, t: TargetBuilder) -> TargetBuilder:
        def configure(s: Any) -> Any:
            s = s.on(trigger).timeout("1h")
            return s.on_timeout(self.rollback) if rollback else s  # type: ignore[attr-defined]

        return t.depends_on(self.deploy).waits_for(configure)  # type: ignore[attr-defined]

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            holder = next(e.holder for e in store.list_locks() if e.key == "env-prod")
            calls.append(("promote", ctx.actor, by(ctx), holder.actor))

        gate = self.approve  # type: ignore[attr-defined]
        return (
            t.depends_on(gate)
            .lock(lambda s: s.lock_key("env", "prod").with_ttl("10m"))
            .executes(body)
        )

    def undeploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: calls.append(("undeploy", ctx.actor, by(ctx))))

    def rollback_target(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda ctx: calls.append(("rollback", ctx.actor, by(ctx))))

    namespace: dict[str, Any] = {
        "url": parameter("where to deploy").default("https://example.com"),
        "token": parameter("a secret").secret(),
        "state_store": lambda self: store,
        "deploy": target(deploy),
        "approve": target(approve),
        "promote": target(promote),
        "undeploy": target(undeploy),
        "rollback": target(rollback_target),
    }
    return type("Release", (Build,), namespace)


def started(
    *, rollback: bool = False, env: dict[str, str] | None = None, actor: str | None = STARTER
) -> tuple[Harness, Recorder, list[Any], str]:
    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    trigger, calls = Recorder(), list[Any]()
    environ = {"TOKEN": TOKEN, **(env or {})}
    h = Harness(build(store, trigger, calls, rollback=rollback), store, clock, env=environ)
    options = h.options(targets=["promote"], actor=actor,
                        params={"url": [f"https://deploy:{TOKEN}@host"]})  # fmt: skip
    import asyncio

    from zuke._engine.run import execute_async

    result = asyncio.run(execute_async(h.build, options))
    assert result.status == "suspended", result.stop_reason
    return h, trigger, calls, result.run_id


def events(h: Harness, run_id: str, tool: str) -> list[str]:
    return [e.actor for e in h.record(run_id).events if e.tool == tool]


# -- where the starter's name comes from -----------------------------------------------------


@pytest.mark.parametrize(
    ("explicit", "env", "expected"),
    [
        ("ops", {"ZUKE_ACTOR": "z", "GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "g"},
         ("ops", "local")),
        (None, {"ZUKE_ACTOR": "z", "GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "g"},
         ("z", "local")),
        (None, {"GITHUB_ACTIONS": "true", "GITHUB_TRIGGERING_ACTOR": "t", "GITHUB_ACTOR": "g"},
         ("t", "github")),
        (None, {"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "g"}, ("g", "github")),
        (None, {"GITHUB_ACTOR": "g", "GITHUB_TRIGGERING_ACTOR": "t"}, None),  # not on Actions
    ],
)  # fmt: skip
def test_the_starters_name_and_its_source(
    explicit: str | None, env: dict[str, str], expected: tuple[str, str] | None
) -> None:
    found = _provenance.resolve(explicit, env)
    if expected is None:  # anybody can set GITHUB_ACTOR locally: the OS user, local
        assert found.source == "local" and found.name not in ("g", "t")
    else:
        assert found == expected


def test_a_run_started_under_github_actions_records_the_triggering_login_as_github() -> None:
    env = {"GITHUB_ACTIONS": "true", "GITHUB_TRIGGERING_ACTOR": "alice", "GITHUB_ACTOR": "bot"}
    h, trigger, _, run_id = started(env=env, actor=None)
    record = h.record(run_id)
    assert (record.actor, record.actor_source) == ("alice", "github")
    assert record_to_json(record)["actorSource"] == "github"
    assert trigger.seen[0]["source"] == "github"


def test_a_local_starter_is_recorded_local() -> None:
    h, trigger, _, run_id = started()
    record = h.record(run_id)
    assert (record.actor, record.actor_source) == (STARTER, "local")
    assert trigger.seen[0]["source"] == "local"


def test_a_record_written_before_the_source_was_kept_reads_as_local() -> None:
    h, _, _, run_id = started(env={"GITHUB_ACTIONS": "true", "GITHUB_ACTOR": "x"}, actor=None)
    raw = json.loads(dumps_record(h.record(run_id)))
    assert raw.pop("actorSource") == "github"
    old = parse_record(raw)
    assert (old.actor, old.actor_source) == ("x", "local")
    assert loads_record(dumps_record(replace(old, actor_source="github"))).actor_source == "github"


# -- kept for ever, in every process -----------------------------------------------------------


def test_the_first_process_sees_the_starter_as_both_actor_and_resumer() -> None:
    _, trigger, calls, _ = started()
    assert calls == [("deploy", STARTER, STARTER)]
    assert trigger.seen[0]["actor"] == trigger.seen[0]["resumed_by"] == STARTER


def test_a_sweep_keeps_the_starter_and_records_its_own_actor() -> None:
    h, trigger, calls, run_id = started()
    trigger.open = True
    [entry] = h.sweep(actor="github-actions[bot]").entries
    assert entry.result == "succeeded"
    record = h.record(run_id)
    assert record.actor == STARTER and record.summary().actor == STARTER
    assert [s.actor for s in h.store.list_runs()] == [STARTER]
    # the gate's context in the sweep: the starter, and the sweep as the resumer
    assert trigger.seen[-1]["actor"] == STARTER
    assert trigger.seen[-1]["resumed_by"] == "github-actions[bot]"
    # later targets: the starter as ctx.actor; the lock is held by the process running it
    assert calls[-1] == ("promote", STARTER, "github-actions[bot]", "github-actions[bot]")
    assert events(h, run_id, "gate-passed") == ["github-actions[bot]"]
    assert events(h, run_id, "resume") == ["github-actions[bot]"]


def test_a_resume_keeps_the_starter_and_records_its_own_actor_in_both_events() -> None:
    h, _, calls, run_id = started()
    outcome = h.resume(run_id, "go", actor="qa-lead")
    assert outcome.status == "succeeded", outcome
    assert h.record(run_id).actor == STARTER
    assert calls[-1] == ("promote", STARTER, "qa-lead", "qa-lead")
    assert events(h, run_id, "signal") == events(h, run_id, "resume") == ["qa-lead"]


def test_a_reap_keeps_the_starter_and_records_the_reaper() -> None:
    h, trigger, calls, run_id = started()
    trigger.open = True
    # The run went on in a process of bob's, which died in promote.
    lease = h.store.acquire_lock(f"zuke-run-{run_id}", LockHolder("bob", run_id, "t"), 1000)
    assert isinstance(lease, LockAcquired)

    def died(record: Any) -> RunDelta:
        rows = dict(record.targets)
        rows["approve"] = replace(rows["approve"], status="succeeded", waiting_for=None)
        return RunDelta(updated_at=record.updated_at, status="running", targets=rows,
                        locks={f"zuke-run-{run_id}": lease.token})  # fmt: skip

    update_run(h.store, run_id, died)
    h.clock.advance(1001)
    report = h.sweep(actor="reaper")
    assert [e.action for e in report.entries] == ["reaped", "resumed"]
    assert h.record(run_id).actor == STARTER
    assert events(h, run_id, "reap") == ["reaper"]
    assert calls[-1] == ("promote", STARTER, "reaper", "reaper")


def test_a_timeout_rollback_keeps_the_starter_and_its_hook_sees_both() -> None:
    h, trigger, calls, run_id = started(rollback=True)
    h.clock.advance(HOUR + 1)
    [entry] = h.sweep(actor="sweeper").entries
    assert (entry.action, entry.result) == ("timed-out", "cancelled")
    record = h.record(run_id)
    assert record.actor == STARTER
    assert events(h, run_id, "timeout") == ["sweeper"]
    assert trigger.timed_out[0]["actor"] == STARTER
    assert trigger.timed_out[0]["resumed_by"] == "sweeper"
    assert ("rollback", STARTER, "sweeper") in calls
    # the walk after the rollback: compensations see the starter too
    assert ("undeploy", STARTER, "sweeper") in calls


def test_a_cancel_keeps_the_starter_and_records_the_canceller() -> None:
    h, _, calls, run_id = started()
    result = cancel_run(h.store, run_id, actor="carol", build=h.build, env=h.env,
                        clock=h.clock)  # fmt: skip
    assert result.status == "cancelled"
    record = h.record(run_id)
    assert record.actor == STARTER
    assert set(events(h, run_id, "cancel")) == {"carol"}
    assert ("undeploy", STARTER, "carol") in calls


# -- what a trigger sees: params, and the run's redactor ----------------------------------------


def test_a_secret_inside_another_parameter_never_reaches_a_trigger() -> None:
    h, trigger, _, run_id = started()
    trigger.open = False
    h.clock.advance(1)
    h.sweep(actor="sweeper")
    assert len(trigger.seen) == 2  # the starting process, then the sweep
    for seen in trigger.seen:
        assert "token" not in seen["params"]
        assert seen["params"]["url"] == "https://deploy:[redacted]@host"
        assert TOKEN not in json.dumps(seen) and seen["redacted"] == "token=[redacted]"
    assert TOKEN not in dumps_record(h.record(run_id))


def test_the_trigger_redactor_masks_every_encoding_of_the_secret() -> None:
    import html
    import re
    from urllib.parse import quote, quote_plus

    contexts: list[WaitContext] = []

    class Keep(Recorder):
        def check(self, ctx: WaitContext) -> NotYet:
            contexts.append(ctx)
            return NotYet()

    clock = ManualClock()
    store = MemoryStateStore(clock=clock)
    h = Harness(build(store, Keep(), []), store, clock, env={"TOKEN": TOKEN})
    run_id = h.start("promote").run_id
    h.clock.advance(1)
    h.sweep()
    assert len(contexts) == 2 and run_id
    forms = [
        TOKEN, html.escape(TOKEN), html.escape(TOKEN, quote=False),
        html.escape(TOKEN).replace("&#x27;", "&#39;"), quote(TOKEN), quote(TOKEN, safe=""),
        quote_plus(TOKEN), re.sub("%..", lambda m: m[0].lower(), quote(TOKEN, safe="")),
        json.dumps(TOKEN)[1:-1],
        repr(TOKEN)[1:-1], html.escape(json.dumps(TOKEN)),
    ]  # fmt: skip
    for ctx in contexts:
        for form in forms:
            text = ctx.redact(f"<p>deploy {form} now</p>")
            assert TOKEN not in text and form not in text, form
            assert "[redacted]" in text


def test_every_redacted_form_is_still_shown_unharmed_around_the_mask() -> None:
    from zuke._redact import Redactor

    r = Redactor([TOKEN])
    assert r.text("a https://x:" + TOKEN + "@h b") == "a https://x:[redacted]@h b"
    assert r.text("nothing secret here") == "nothing secret here"
