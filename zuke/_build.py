"""The ``Build`` base class and its overridable hooks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zuke._errors import BuildDefinitionError
from zuke._param_parse import default_problem
from zuke._params import Parameter, parameters_of
from zuke._target import Target, TargetBuilder, definitions_of

if TYPE_CHECKING:
    from zuke._reporting import RunReporter
    from zuke.state._protocol import StateStore

#: Commands of the command line; a target cannot take one of these names.
RESERVED_TARGET_NAMES = frozenset({"graph", "runs", "resume", "cancel", "locks", "serve", "mcp"})

#: Flags the command line owns; a parameter cannot take one of these names.
RESERVED_PARAMETER_NAMES = frozenset(
    {"list", "json", "skip", "parallel", "state", "actor", "file", "help", "format"}
)


class Build:
    """Subclass this and declare targets with ``@target`` and parameters with ``parameter()``."""

    def deadline(self) -> str | int | None:
        """A wall-clock budget for a whole run (e.g. ``"45m"``), or ``None``."""
        return None

    def state_store(self) -> StateStore | None:
        """The store for this build's runs, overriding the environment; ``None`` to not override."""
        return None

    def reporters(self) -> Sequence[RunReporter]:
        """Who is told of this build's runs as they move (``zuke_gh.github_deployments``, a
        :class:`~zuke.RunReporter` of your own); none by default. See docs/authoring.md."""
        return ()

    def extra_edges(self) -> list[tuple[Target, Target]]:
        """Ordering-only ``(before, after)`` edges, applied when both ends are in the run."""
        return []

    async def order_with(self, targets: Mapping[str, Target]) -> list[tuple[Target, Target]]:
        """Like :meth:`extra_edges`, resolved at run time (e.g. from a file or an API)."""
        return []


def build_name(cls: type[Build]) -> str:
    """The name recorded on runs: the class name."""
    return cls.__name__


def parameters(cls: type[Build]) -> list[Parameter[Any]]:
    """The declared parameters, checked against the command line's own flags."""
    params = parameters_of(cls)
    for p in params:
        if p.name in RESERVED_PARAMETER_NAMES:
            raise BuildDefinitionError(
                f"parameter {p.name!r} of {cls.__name__} collides with the built-in flag "
                f"--{p.name}; rename it"
            )
        problem = default_problem(p)
        if problem:
            raise BuildDefinitionError(f"parameter {p.name!r} of {cls.__name__}: {problem}")
    return params


def _no_such_attribute(target: str, build: Build, exc: AttributeError, names: list[str]) -> str:
    """``self.elsewhere`` in a definition: name it, where, and the targets it may have meant."""
    import difflib
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    at = f" (line {frames[-1].lineno})" if frames and frames[-1].lineno else ""
    attribute = exc.name or ""
    close = difflib.get_close_matches(attribute, names, n=3, cutoff=0.5)
    hint = (
        "; did you mean " + " or ".join(f"self.{n}" for n in close) + "?"
        if close
        else f"; its targets are {', '.join(names)}"
    )
    return (
        f"target {target!r}: self.{attribute} is not a target or attribute of "
        f"{type(build).__name__}{at}{hint}"
    )


def define_targets(build: Build) -> dict[str, TargetBuilder]:
    """Run every definition method once (after parameters resolve) and collect the builders."""
    builders: dict[str, TargetBuilder] = {}
    for definition in definitions_of(type(build)):
        if definition.name in RESERVED_TARGET_NAMES:
            raise BuildDefinitionError(
                f"target {definition.name!r} of {type(build).__name__} has the name of the "
                f"command `zuke {definition.name}`; rename it"
            )
        try:
            builders[definition.name] = definition.build(build)
        except AttributeError as exc:
            if exc.obj is not build or not exc.name:
                raise
            names = [d.name for d in definitions_of(type(build))]
            raise BuildDefinitionError(
                _no_such_attribute(definition.name, build, exc, names)
            ) from exc
    if not builders:
        raise BuildDefinitionError(
            f"{type(build).__name__} declares no targets; add a method decorated with @target"
        )
    return builders
