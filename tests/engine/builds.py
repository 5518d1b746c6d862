"""Build classes generated for tests: long chains."""

from __future__ import annotations

from typing import Any

from zuke import Build, TargetBuilder, target


def chain_build(length: int, **members: Any) -> type[Build]:
    """A build ``t0 <- t1 <- ... <- t{length-1}`` with no-op bodies, plus ``members``."""
    namespace: dict[str, Any] = dict(members)
    for i in range(length):

        def define(self: Build, t: TargetBuilder, i: int = i) -> TargetBuilder:
            t = t.executes(lambda: None)
            return t.depends_on(getattr(self, f"t{i - 1}")) if i else t

        define.__name__ = f"t{i}"
        namespace[f"t{i}"] = target(define)
    return type("Chain", (Build,), namespace)
