"""Every owner continues a due signal: a signal delivered while another branch of the run
still runs is stored, the deliverer is told the running run takes it, and the run takes it
when that branch ends — through ``zuke.execute()`` as on the command line and in MCP."""

from __future__ import annotations

import threading
from typing import Any

import zuke
from zuke import Build, external_signal, target
from zuke._target import TargetBuilder
from zuke.state.memory import MemoryStateStore


def busy_build(store: MemoryStateStore, calls: list[Any]) -> type[Build]:
    """``approve`` (a signal gate) and ``build_docs`` side by side under ``release``;
    ``build_docs`` delivers the signal from another thread while it runs."""

    def build_docs(self: Build, t: TargetBuilder) -> TargetBuilder:
        def body(ctx: Any) -> None:
            told: list[Any] = []

            def deliver() -> None:
                told.append(zuke.resume_run(type(self), ctx.run_id, signal="go", store=store,
                                            actor="qa", env={}))  # fmt: skip

            thread = threading.Thread(target=deliver)
            thread.start()
            thread.join()
            calls.append(("delivered", told[0].action, told[0].status))

        return t.executes(body)

    def approve(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.waits_for(lambda s: s.on(external_signal("go")))

    def promote(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.approve).executes(lambda ctx: calls.append("promote"))  # type: ignore[attr-defined]

    def release(self: Build, t: TargetBuilder) -> TargetBuilder:
        return t.depends_on(self.promote, self.build_docs)  # type: ignore[attr-defined]

    namespace: dict[str, Any] = {"state_store": lambda self: store}
    for fn in (build_docs, approve, promote, release):
        namespace[fn.__name__] = target(fn)
    return type("Release", (Build,), namespace)


def test_execute_consumes_a_signal_delivered_while_another_branch_ran() -> None:
    store = MemoryStateStore()
    calls: list[Any] = []
    result = zuke.execute(busy_build(store, calls), ["release"], env={})
    # the deliverer was told the running run takes it ...
    assert calls[0] == ("delivered", "delivered", "running")
    # ... and it did: not left parked with the signal stored and the gate waiting
    assert result.status == "succeeded", result
    assert calls[1:] == ["promote"]
    found = store.get_run(result.run_id)
    assert found is not None and found.record.status == "succeeded"
    assert [e.tool for e in found.record.events].count("resume") == 1
