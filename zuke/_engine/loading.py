"""Loading a build: parameters resolved, the build instantiated, its graph frozen and checked.

What ``zuke --list``, ``graph`` and ``--help`` need of a build, and the first
step of every run (:mod:`zuke._engine.run`). Kept apart from the run so that
those views load neither asyncio nor the scheduler, the state writer or the
claims (about half of ``zuke --list``'s start-up, issue 19).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from zuke._build import Build, define_targets, parameters
from zuke._engine.fan_out import SpecIndex, with_secrets
from zuke._engine.plan import BuildGraph
from zuke._engine.preflight import preflight
from zuke._errors import BuildDefinitionError, ParameterError, UsageError, ZukeError
from zuke._lock_settings import check_lock
from zuke._params import Resolution, bind, resolve
from zuke._redact import Redactor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


@dataclass
class LoadedBuild:
    """A build instance with its parameters bound and its graph validated."""

    build: Build
    graph: BuildGraph
    resolution: Resolution

    @functools.cached_property
    def redactor(self) -> Redactor:
        return Redactor(self.resolution.secrets)

    @functools.cached_property
    def index(self) -> SpecIndex:
        """Finds any target's spec by name, a fan-out's sub-targets included."""
        return SpecIndex(self.graph.specs)

    @functools.cached_property
    def public_params(self) -> dict[str, Any]:
        """Every parameter's value, defaults included, but no secret (what a trigger reads):
        a secret parameter is left out, and a secret's value inside another one (``--url
        https://deploy:TOKEN@host``) is masked, in every encoding the redactor knows."""
        hidden = {p.name for p in parameters(type(self.build)) if p.is_secret}
        redact = self.redactor.json
        return {k: redact(v) for k, v in self.resolution.values.items() if k not in hidden}


def load(
    build_cls: type[Build],
    params: Mapping[str, Sequence[str]],
    env: Mapping[str, str],
    *,
    lenient: bool = False,
) -> LoadedBuild:
    """Resolve parameters, instantiate, define targets, validate the graph."""
    if not (isinstance(build_cls, type) and issubclass(build_cls, Build)):
        raise BuildDefinitionError(f"expected a Build subclass, got {build_cls!r}")
    declared = parameters(build_cls)
    known = {p.name for p in declared}
    unknown = [name for name in params if name not in known]
    if unknown:
        flags = ", ".join("--" + n.replace("_", "-") for n in unknown)
        raise UsageError(f"Unknown parameter {flags}. Run --help to see the available flags.")
    resolution = resolve(declared, params, env, lenient=lenient)
    if resolution.errors:
        raise ParameterError(resolution.problem())
    loaded_redactor = Redactor(resolution.secrets)
    with preflight(loaded_redactor):  # from here on, an error may quote a secret
        build = build_cls()
        bind(build, declared, resolution)
        try:
            builders = define_targets(build)
        except ZukeError:
            raise
        except Exception as exc:
            raise BuildDefinitionError(
                f"defining the targets of {build_cls.__name__} failed: {exc}"
            ) from exc
        # a secret never names a fan-out item, in this process or any that resumes the run
        graph = with_secrets(BuildGraph.from_builders(builders), loaded_redactor)
        deps = {name: spec.depends_on for name, spec in graph.specs.items()}  # held_until
        for spec in graph.specs.values():
            if spec.lock is not None:
                check_lock(spec.name, spec.lock, loaded_redactor, deps)
    return LoadedBuild(build=build, graph=graph, resolution=resolution)


__all__ = ["LoadedBuild", "load"]
