"""Materialising a fan-out: its items, their stages, and every sub-target's spec.

A fan-out's sub-targets exist only once its items are read, so anything that
meets a sub-target's name outside the run that created it — a sweep checking
a gate inside an item, a resume, the compensation walk of a cancel — asks a
:class:`SpecIndex`, which re-materialises the fan-out from the (recorded)
parameters and finds the sub-target by name. The items function must give
the same items for the same parameters; a sub-target with no twin is
reported as such by whoever looked it up.

Every process keys items alike because the secrets that hide an item's text
travel with the fan-out's spec (:func:`with_secrets`, when the build loads),
not with whoever asks.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from zuke._engine.plan import BuildGraph, TargetSpec, freeze
from zuke._errors import BuildDefinitionError, ZukeError
from zuke._fan_out import STAGE_NAME, item_keys, split_sub_name, sub_name
from zuke._redact import Redactor
from zuke._target import TargetBuilder

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass


class FanOutError(ZukeError):
    """A fan-out's items or stages could not be materialised (the fan-out fails)."""


@dataclass(frozen=True)
class Item:
    """One item of a fan-out: its key (in sub-target names), its index, its stages in order."""

    key: str
    index: int
    stages: tuple[TargetSpec, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)


async def read_items(spec: TargetSpec) -> list[Any]:
    """Call the fan-out's items function (sync or async) and check what it returned."""
    fan = spec.fan_out
    assert fan is not None
    try:
        values: Any = fan.items()
        if inspect.isawaitable(values):
            values = await values
    except ZukeError:
        raise
    except Exception as exc:
        raise _error(spec, f"its items function raised: {exc}") from exc
    if isinstance(values, (str, bytes, Mapping)) or not _iterable(values):
        raise _error(
            spec, f"its items function must return a list of items, got {type(values).__name__}"
        )
    return list(values)


def _iterable(value: object) -> bool:
    try:
        iter(value)  # type: ignore[call-overload]
    except TypeError:
        return False
    return True


def _error(spec: TargetSpec, message: str) -> FanOutError:
    """A fan-out's error, with the run's secrets taken out (it may quote an item)."""
    secrets = spec.fan_out.secrets if spec.fan_out is not None else Redactor()
    return FanOutError(secrets.text(f"fan-out {spec.name!r}: {message}"))


def stages_of(spec: TargetSpec, value: Any, index: int, key: str) -> tuple[TargetSpec, ...]:
    """Freeze the stages ``factory(value, index)`` returns; each depends on the one before."""
    fan = spec.fan_out
    assert fan is not None
    try:
        stages = fan.factory(value, index)
    except ZukeError:
        raise
    except Exception as exc:
        raise _error(spec, f"its factory raised for item {key!r}: {exc}") from exc
    if not isinstance(stages, Mapping) or not stages:
        raise _error(
            spec,
            "the factory must return a dict of stage name → target() builder "
            f"(in order), got {type(stages).__name__ if stages is not None else 'None'}",
        )
    frozen: list[TargetSpec] = []
    for stage, builder in stages.items():
        if not isinstance(stage, str) or not STAGE_NAME.fullmatch(stage):
            raise _error(spec, f"stage name {stage!r} must be 1-64 characters from [A-Za-z0-9_-]")
        if fan.secrets.reveals(stage):
            raise _error(
                spec,
                "a stage name contains the value of a secret parameter; names are recorded "
                "and shown in the clear, so name stages from non-secret values",
            )
        if not isinstance(builder, TargetBuilder) or builder.name is not None:
            raise _error(spec, f"stage {stage!r} must be a free target() builder, got {builder!r}")
        if builder._depends_on:
            raise _error(
                spec,
                f"stage {stage!r} declares depends_on(); a stage depends on the stage "
                "before it — put other dependencies on the fan-out target",
            )
        name = sub_name(spec.name, key, stage)
        try:
            frozen_stage = freeze(builder, name, stage=True)
        except BuildDefinitionError as exc:
            raise FanOutError(fan.secrets.text(str(exc))) from exc
        wait = frozen_stage.wait
        if wait is not None and fan.secrets.reveals(wait.trigger.descriptor):
            raise _error(
                spec,
                f"stage {stage!r} waits for a trigger whose name contains the value of a secret "
                "parameter; it is recorded and typed in the clear (zuke resume --signal), so "
                "name it from non-secret values (the item's index)",
            )
        before = (frozen[-1].name,) if frozen else ()
        frozen.append(replace(_inherit(frozen_stage, fan.secrets), depends_on=before))
    return tuple(frozen)


def _inherit(spec: TargetSpec, secrets: Redactor) -> TargetSpec:
    """``spec`` (a stage) keying its own items, if it fans out, by the run's secrets."""
    if spec.fan_out is None:
        return spec
    return replace(spec, fan_out=replace(spec.fan_out, secrets=secrets))


def with_secrets(graph: BuildGraph, secrets: Redactor) -> BuildGraph:
    """``graph`` with its fan-outs keying items by ``secrets`` (the run's): called once, when
    the build loads, so a run, its resume, a sweep and a cancel's walk name items alike."""
    if not secrets:
        return graph
    return BuildGraph({name: _inherit(spec, secrets) for name, spec in graph.specs.items()})


async def materialise(spec: TargetSpec) -> list[Item]:
    """Read the fan-out's items and freeze every item's stages."""
    fan = spec.fan_out
    assert fan is not None
    values = await read_items(spec)
    keys = item_keys(values, fan.secrets)
    return [
        Item(key, index, stages_of(spec, value, index, key))
        for index, (value, key) in enumerate(zip(values, keys, strict=True))
    ]


class SpecIndex:
    """Finds the spec of any target of a build, a fan-out's sub-targets (nested) included."""

    def __init__(self, specs: Mapping[str, TargetSpec]) -> None:
        self.specs = specs
        self._items: dict[str, list[Item]] = {}
        self._found: dict[str, TargetSpec] = {}

    async def items(self, spec: TargetSpec) -> list[Item]:
        """The fan-out's items, materialised once per index."""
        if spec.name not in self._items:
            items = await materialise(spec)
            self._items[spec.name] = items
            for item in items:
                for stage in item.stages:
                    self._found[stage.name] = stage
                    if stage.compensation is not None:
                        self._found[stage.compensation.name] = stage.compensation
        return self._items[spec.name]

    def known(self, name: str) -> TargetSpec | None:
        """The spec of ``name`` if it is declared or already materialised (no items read)."""
        return self.specs.get(name) or self._found.get(name)

    async def get(self, name: str) -> TargetSpec | None:
        """The spec of ``name``, materialising the fan-outs it belongs to; ``None`` if it has
        no twin in the build. Raises :class:`FanOutError` if a fan-out cannot be materialised."""
        spec = self.known(name)
        if spec is not None:
            return spec
        owner = name.removesuffix(".on_cancel") if name.endswith(".on_cancel") else None
        if owner is not None:
            found = await self.get(owner)
            return found.compensation if found is not None else None
        split = split_sub_name(name)
        if split is None:
            return None
        parent = await self.get(split[0])
        if parent is None or parent.fan_out is None:
            return None
        await self.items(parent)
        return self._found.get(name)
