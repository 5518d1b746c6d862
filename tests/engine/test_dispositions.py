"""A gate's target disposition runs instead of the gate: one that needs the gate, or anything
after it, is refused when the build loads, naming both (it would take the run back to the gate
it is settling: every sweep would suspend it again and print "cancelled", the target never
run)."""

from __future__ import annotations

from typing import Any

import pytest

from zuke import Build, BuildDefinitionError, external_signal, target
from zuke._engine.loading import load
from zuke._target import TargetBuilder


def release(rollback_needs: str | None, *, which: str = "on_timeout") -> type[Build]:
    """``deploy → approve (gate) → promote → release``; ``rollback`` (the gate's
    disposition) depends on ``rollback_needs``."""

    def deploy(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.executes(lambda: None)

    def approve(self: Build, t: TargetBuilder) -> TargetBuilder:
        def configure(s: Any) -> Any:
            s = s.on(external_signal("ok")).timeout("1h")
            return getattr(s, which)(self.rollback)  # type: ignore[attr-defined]

        return t.depends_on(self.deploy).waits_for(configure)  # type: ignore[attr-defined]

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.approve).executes(lambda: None)  # type: ignore[attr-defined]

    def release_target(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.promote)  # type: ignore[attr-defined]

    def rollback(self: Build, t: TargetBuilder) -> TargetBuilder:
        if rollback_needs is not None:
            t = t.depends_on(getattr(self, rollback_needs))
        return t.executes(lambda: None)

    namespace: dict[str, Any] = {
        "deploy": target(deploy),
        "approve": target(approve),
        "promote": target(promote),
        "release": target(release_target),
        "rollback": target(rollback),
    }
    return type("Release", (Build,), namespace)


@pytest.mark.parametrize("which", ["on_timeout", "on_failure"])
def test_a_disposition_that_depends_on_its_own_gate_is_refused_naming_both(which: str) -> None:
    with pytest.raises(BuildDefinitionError) as raised:
        load(release("approve", which=which), {}, {})
    message = str(raised.value)
    assert f"gate 'approve': its {which}() target 'rollback'" in message
    assert "depends on 'approve', which is the gate itself" in message


@pytest.mark.parametrize("after", ["promote", "release"])
def test_a_disposition_that_depends_on_what_comes_after_its_gate_is_refused(after: str) -> None:
    expected = f"depends on '{after}', which is after the gate"
    with pytest.raises(BuildDefinitionError, match=expected):
        load(release(after), {}, {})


def test_a_disposition_that_needs_only_what_came_before_its_gate_loads() -> None:
    loaded = load(release("deploy"), {}, {})
    assert loaded.graph.specs["approve"].wait is not None


def test_the_gate_itself_as_its_own_disposition_is_refused() -> None:
    def approve(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.waits_for(lambda s: s.on(external_signal("ok")).on_failure(self.approve))  # type: ignore[attr-defined]

    build = type("Loop", (Build,), {"approve": target(approve)})
    with pytest.raises(BuildDefinitionError, match="target 'approve' is the gate itself"):
        load(build, {}, {})
