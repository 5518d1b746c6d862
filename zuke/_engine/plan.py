"""Freezing builders into immutable specs, validating the graph, planning a run.

Everything here runs before any target does: an unknown reference or a cycle
is reported up front, naming the targets involved. Graph walks are iterative
so a 10,000-target chain does not hit Python's recursion limit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import TYPE_CHECKING, Any

from zuke._errors import BuildDefinitionError, GraphError
from zuke._fan_out import FanOutSpec, freeze_fan_out
from zuke._target import BodySpec, Target, TargetBuilder, body_spec
from zuke._waits import WaitSpec, freeze_wait

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass(frozen=True)
class TargetSpec:
    """One target as the engine sees it: frozen, validated."""

    name: str
    description: str = ""
    depends_on: tuple[str, ...] = ()
    body: BodySpec | None = None
    timeout_ms: int | None = None
    retries: int = 0
    retry_delay_ms: int = 0
    proceed_after_failure: bool = False
    lock: Callable[[Any], Any] | None = None
    #: a gate's settings (a gate has no body)
    wait: WaitSpec | None = None
    #: crash-durable effects, in declaration order: (name, body)
    effects: tuple[tuple[str, BodySpec], ...] = ()
    #: the compensation target that undoes this one when the run is cancelled
    on_cancel: str | None = None
    #: a fan-out stage's own compensation (a free ``target()`` builder), frozen
    compensation: TargetSpec | None = None
    #: ``for_each``: the items and stages this target fans out over
    fan_out: FanOutSpec | None = None
    #: ``environment(name, url=)``: the environment it deploys to, and its URL (a string,
    #: or a function of ``ctx`` the scheduler calls as the target starts)
    environment: str | None = None
    environment_url: str | Callable[[Any], Any] | None = None


def _check_gate(builder: TargetBuilder, name: str) -> None:
    """A gate waits; it has nothing a setting for a body could apply to."""
    where = f"gate {name!r}"
    if builder._body is not None:
        raise BuildDefinitionError(f"{where} waits_for() and executes(): a gate has no body")
    if builder._lock is not None:
        raise BuildDefinitionError(f"{where}: a gate takes no lock (lock the targets around it)")
    if builder._timeout_ms is not None or builder._retries:
        raise BuildDefinitionError(
            f"{where}: timeout()/retry() apply to a body; bound the wait with "
            "waits_for(lambda s: s.on(...).timeout(...))"
        )


def _check_fan_out(builder: TargetBuilder, name: str) -> None:
    """A fan-out's work is its stages: it has no body and does not wait itself."""
    where = f"fan-out {name!r}"
    if builder._body is not None:
        raise BuildDefinitionError(
            f"{where}: for_each() and executes(): a fan-out's work is its stages"
        )
    if builder._wait is not None:
        raise BuildDefinitionError(
            f"{where}: for_each() and waits_for(): put the gate among the stages"
        )
    if builder._effects:
        raise BuildDefinitionError(f"{where}: effects belong to a stage, not to the fan-out")


def freeze(builder: TargetBuilder, name: str, *, stage: bool = False) -> TargetSpec:
    """Freeze a builder (``stage``: a fan-out stage, which may name a free compensation)."""
    fan_out = None
    if builder._for_each is not None:
        _check_fan_out(builder, name)
        fan_out = freeze_fan_out(name, *builder._for_each)
    wait = None
    if builder._wait is not None:
        _check_gate(builder, name)
        wait = freeze_wait(name, builder._wait)
    on_cancel: str | None = None
    compensation: TargetSpec | None = None
    if isinstance(builder._on_cancel, TargetBuilder):
        if not stage:
            raise BuildDefinitionError(
                f"target {name!r}: on_cancel() got a builder; pass a target handle such as "
                "self.<name> (a free target() compensation is only for fan-out stages)"
            )
        compensation = freeze(builder._on_cancel, f"{name}.on_cancel", stage=True)
        on_cancel = compensation.name
    elif builder._on_cancel is not None:
        on_cancel = builder._on_cancel.name
    effects = tuple(
        (effect, body_spec(fn, f"target {name!r} effect {effect!r}"))
        for effect, fn in builder._effects
    )
    return TargetSpec(
        name=name,
        description=builder._description,
        depends_on=tuple(dict.fromkeys(t.name for t in builder._depends_on)),
        body=None if builder._body is None else body_spec(builder._body, f"target {name!r}"),
        timeout_ms=builder._timeout_ms,
        retries=builder._retries,
        retry_delay_ms=builder._retry_delay_ms,
        proceed_after_failure=builder._proceed_after_failure,
        lock=builder._lock,
        wait=wait,
        effects=effects,
        on_cancel=on_cancel,
        compensation=compensation,
        fan_out=fan_out,
        environment=builder._environment,
        environment_url=builder._environment_url,
    )


@dataclass(frozen=True)
class BuildGraph:
    """Every target of a build, frozen and validated (no unknown references, no cycles)."""

    specs: Mapping[str, TargetSpec]

    @classmethod
    def from_builders(cls, builders: Mapping[str, TargetBuilder]) -> BuildGraph:
        specs = {name: freeze(b, name) for name, b in builders.items()}
        for spec in specs.values():
            for dep in spec.depends_on:
                if dep not in specs:
                    raise GraphError(f"target {spec.name!r} depends on unknown target {dep!r}")
            if spec.on_cancel is not None and spec.on_cancel not in specs:
                raise GraphError(
                    f"target {spec.name!r}: on_cancel() names unknown target {spec.on_cancel!r}"
                )
            wait = spec.wait
            if wait is not None and wait.on_timeout_is_target and wait.on_timeout not in specs:
                raise GraphError(
                    f"gate {spec.name!r}: on_timeout() names unknown target {wait.on_timeout!r}"
                )
            if wait is not None and wait.on_failure_is_target and wait.on_failure not in specs:
                raise GraphError(
                    f"gate {spec.name!r}: on_failure() names unknown target {wait.on_failure!r}"
                )
        check_acyclic({n: s.depends_on for n, s in specs.items()}, specs)
        graph = cls(specs)
        graph.check_dispositions()
        return graph

    def check_dispositions(self) -> None:
        """A gate's target disposition (``on_timeout`` / ``on_failure``) runs *instead of*
        the gate: one that needs the gate, or anything after it, would take the run back to
        the gate it is settling (every sweep would suspend it again and the target never
        run). Refused when the build loads, naming both."""
        after: dict[str, set[str]] = {}  # gate -> the gate and every target depending on it
        dependents: dict[str, list[str]] = {}  # made for the first disposition (most: none)
        for gate, spec in self.specs.items():
            wait = spec.wait
            if wait is None:
                continue
            for what, target, is_target in (("on_timeout", wait.on_timeout,
                                             wait.on_timeout_is_target),
                                            ("on_failure", wait.on_failure,
                                             wait.on_failure_is_target)):  # fmt: skip
                if not is_target:
                    continue
                if not dependents:
                    for name, other in self.specs.items():
                        for dep in other.depends_on:
                            dependents.setdefault(dep, []).append(name)
                if gate not in after:
                    after[gate] = _reachable(gate, dependents)
                needs = [target] if target == gate else self.closure(self.specs[target].depends_on)
                bad = next((n for n in needs if n in after[gate]), None)
                if bad is None:
                    continue
                how = "is" if bad == target else f"depends on {bad!r}, which is"
                where = "the gate itself" if bad == gate else "after the gate"
                raise BuildDefinitionError(
                    f"gate {gate!r}: its {what}() target {target!r} {how} {where}; a "
                    "disposition runs instead of the gate, so it cannot need the gate or "
                    "anything that waits for it. Give it only what came before the gate"
                )

    def closure(self, roots: Iterable[str]) -> list[str]:
        """``roots`` and everything they transitively depend on."""
        seen: dict[str, None] = {}
        stack = list(roots)[::-1]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen[name] = None
            stack.extend(reversed(self.specs[name].depends_on))
        return list(seen)


def _reachable(start: str, dependents: Mapping[str, Sequence[str]]) -> set[str]:
    """``start`` and every target that (transitively) depends on it."""
    seen = {start}
    stack = [start]
    while stack:
        for nxt in dependents.get(stack.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return seen


def check_acyclic(edges: Mapping[str, Sequence[str]], order: Iterable[str]) -> list[str]:
    """Raise :class:`GraphError` naming the first cycle found (``a → b → a``); else the
    targets of ``order`` and what they reach in a topological order — depth-first
    post-order, each target's ``edges`` (its predecessors) first, ``order`` otherwise.

    One walk does both: planning a run checked the graph and ordered it in two walks."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    out: list[str] = []
    for start in order:
        if state.get(start):
            continue
        path: list[str] = [start]
        iters = [iter(edges.get(start, ()))]
        state[start] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                done = path.pop()
                state[done] = 2
                out.append(done)
                iters.pop()
                continue
            mark = state.get(nxt)
            if mark == 1:
                cycle = [*path[path.index(nxt) :], nxt]
                raise GraphError("Dependency cycle detected: " + " → ".join(cycle))
            if mark is None:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(edges.get(nxt, ())))
    return out


@dataclass(frozen=True)
class Plan:
    """What one run executes, in a deterministic order."""

    order: tuple[str, ...]
    specs: Mapping[str, TargetSpec]
    #: hard dependencies (must succeed) per planned target
    hard: Mapping[str, tuple[str, ...]]
    #: ordering-only predecessors (must settle) per planned target
    soft: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    skipped: frozenset[str] = frozenset()
    #: the compensation targets (``on_cancel``) of planned targets, by name
    compensations: Mapping[str, TargetSpec] = field(default_factory=dict)
    #: every target the build declares (a fan-out item's compensation may name any)
    declared: Mapping[str, TargetSpec] = field(default_factory=dict)

    def dependents(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {n: [] for n in self.order}
        for name in self.order:
            for dep in (*self.hard[name], *self.soft.get(name, ())):
                out[dep].append(name)
        return out


def make_plan(
    graph: BuildGraph,
    roots: Sequence[str],
    *,
    skip: Iterable[str] = (),
    ordering: Iterable[tuple[Target, Target]] = (),
) -> Plan:
    """Plan ``roots`` and their dependencies; ordering edges apply when both ends are planned."""
    members = graph.closure(roots)
    planned = set(members)
    soft: dict[str, list[str]] = {}
    for before, after in ordering:
        b, a = _edge_end(before), _edge_end(after)
        if b in planned and a in planned and b != a:
            soft.setdefault(a, []).append(b)
    preds = {n: (*graph.specs[n].depends_on, *soft.get(n, ())) for n in members}
    order = check_acyclic(preds, members)
    return Plan(
        order=tuple(order),
        specs={n: graph.specs[n] for n in order},
        hard={n: graph.specs[n].depends_on for n in order},
        soft={n: tuple(dict.fromkeys(v)) for n, v in soft.items()},
        skipped=frozenset(skip) & planned,
        compensations={
            c: graph.specs[c] for n in order if (c := graph.specs[n].on_cancel) is not None
        },
        declared=graph.specs,
    )


def _edge_end(value: object) -> str | None:
    if isinstance(value, Target):
        return value.name
    name = getattr(value, "name", None)
    return name if isinstance(name, str) else None


def requires_state(spec: TargetSpec) -> bool:
    """Whether ``spec`` cannot run without a store: a lock, a gate, an effect, a compensation."""
    return (
        spec.lock is not None or spec.wait is not None or bool(spec.effects) or bool(spec.on_cancel)
    )
