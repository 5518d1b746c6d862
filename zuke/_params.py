"""Parameters: declaration (``parameter()``), parsing and resolution.

A parameter is declared as a class attribute of a build and read on the
instance as ``self.name.value``. Declarations are immutable: each fluent call
returns a new :class:`Parameter`, so a declaration can be shared safely.

Values come from ``--name value`` flags (repeatable for arrays), else the
environment variable ``NAME``, else the default. Every value is parsed and
validated before any target runs; all problems are reported together in one
:class:`~zuke.ParameterError`. A secret's raw value never appears in an error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Generic, Literal, TypeVar, cast, overload

from zuke._errors import ParameterError

T = TypeVar("T")
Kind = Literal["string", "number", "integer", "boolean"]

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


@dataclass(frozen=True)
class Parameter(Generic[T]):
    """A declared parameter. Read its value on the build instance: ``self.repo.value``."""

    description: str = ""
    kind: Kind = "string"
    is_required: bool = False
    default_value: Any = UNSET
    choices: tuple[str, ...] = ()
    is_array: bool = False
    is_secret: bool = False
    name: str = ""
    _flag_override: str | None = field(default=None, repr=False)

    # -- fluent declaration -------------------------------------------------

    @overload
    def required(self: Parameter[str | None]) -> Parameter[str]: ...  # type: ignore[overload-overlap]
    @overload
    def required(self: Parameter[float | None]) -> Parameter[float]: ...  # type: ignore[overload-overlap]
    @overload
    def required(self: Parameter[int | None]) -> Parameter[int]: ...
    @overload
    def required(self: Parameter[T]) -> Parameter[T]: ...
    def required(self) -> Parameter[Any]:
        """The run refuses to start unless a non-blank value is supplied."""
        return replace(self, is_required=True, default_value=UNSET)

    @overload
    def number(self: Parameter[str]) -> Parameter[float]: ...
    @overload
    def number(self: Parameter[str | None]) -> Parameter[float | None]: ...
    def number(self) -> Parameter[Any]:
        """Parse the value as a finite float."""
        return replace(self, kind="number", choices=())

    @overload
    def integer(self: Parameter[str]) -> Parameter[int]: ...
    @overload
    def integer(self: Parameter[str | None]) -> Parameter[int | None]: ...
    def integer(self) -> Parameter[Any]:
        """Parse the value as an int."""
        return replace(self, kind="integer", choices=())

    def boolean(self) -> Parameter[bool]:
        """``true/1/yes/on`` or ``false/0/no/off``; a bare ``--flag`` means true; default false."""
        default = False if self.default_value is UNSET else self.default_value
        flipped = replace(
            self, kind="boolean", choices=(), is_required=False, default_value=default
        )
        return cast("Parameter[bool]", flipped)

    def options(self, *values: str) -> Parameter[T]:
        """Restrict the value (each element, for an array) to ``values``."""
        if not values:
            raise ParameterError("options() needs at least one value")
        return replace(self, choices=tuple(str(v) for v in values))

    @overload
    def array(self: Parameter[str | None]) -> Parameter[list[str]]: ...  # type: ignore[overload-overlap]
    @overload
    def array(self: Parameter[str]) -> Parameter[list[str]]: ...
    @overload
    def array(self: Parameter[float | None]) -> Parameter[list[float]]: ...  # type: ignore[overload-overlap]
    @overload
    def array(self: Parameter[float]) -> Parameter[list[float]]: ...
    @overload
    def array(self: Parameter[int | None]) -> Parameter[list[int]]: ...
    @overload
    def array(self: Parameter[int]) -> Parameter[list[int]]: ...
    @overload
    def array(self: Parameter[bool]) -> Parameter[list[bool]]: ...
    def array(self) -> Parameter[Any]:
        """A list: comma-separated or repeated flags; blanks dropped; elements validated."""
        return replace(self, is_array=True)

    def secret(self) -> Parameter[T]:
        """Never recorded in the run record, never printed."""
        return replace(self, is_secret=True)

    @overload
    def default(self: Parameter[str | None], value: str) -> Parameter[str]: ...
    @overload
    def default(self: Parameter[float | None], value: float) -> Parameter[float]: ...
    @overload
    def default(self: Parameter[int | None], value: int) -> Parameter[int]: ...
    @overload
    def default(self: Parameter[T], value: T) -> Parameter[T]: ...
    def default(self, value: Any) -> Parameter[Any]:
        """The value when none is supplied."""
        return replace(self, default_value=value, is_required=False)

    # -- descriptor -----------------------------------------------------------

    def __set_name__(self, owner: type, name: str) -> None:
        object.__setattr__(self, "name", name)

    @overload
    def __get__(self, instance: None, owner: type) -> Parameter[T]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> BoundParameter[T]: ...
    def __get__(self, instance: object | None, owner: type) -> Parameter[T] | BoundParameter[T]:
        if instance is None:
            return self
        bound: dict[str, BoundParameter[Any]] = instance.__dict__.setdefault("_zuke_params", {})
        if self.name not in bound:
            bound[self.name] = BoundParameter(self)
        return bound[self.name]

    # -- naming -------------------------------------------------------------

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env_var(self) -> str:
        return self.name.upper()

    @property
    def kind_label(self) -> str:
        label: str = self.kind
        if self.choices:
            label = "one of " + ", ".join(self.choices)
        return f"list of {label}" if self.is_array else label


class BoundParameter(Generic[T]):
    """A parameter on one build instance: holds its resolved value."""

    def __init__(self, spec: Parameter[T]) -> None:
        self.spec = spec
        self._value: Any = UNSET
        self._raw: str | None = None

    @property
    def value(self) -> T:
        if self._value is UNSET:
            raise ParameterError(
                f"parameter {self.spec.flag} was read before it was resolved "
                "(read it inside a body or a definition, not at import time)"
            )
        return self._value  # type: ignore[no-any-return]

    @property
    def is_resolved(self) -> bool:
        return self._value is not UNSET

    @property
    def raw(self) -> str | None:
        """The supplied text (for the run record), or ``None`` if the default applied."""
        return self._raw

    def set(self, value: Any, raw: str | None) -> None:
        self._value = value
        self._raw = raw


def parameters_of(cls: type) -> list[Parameter[Any]]:
    """The parameters declared on ``cls`` and its bases, base classes first."""
    seen: dict[str, Parameter[Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Parameter):
                seen.pop(name, None)
                seen[name] = value
    return list(seen.values())


# -- parsing ------------------------------------------------------------------


def _parse_scalar(p: Parameter[Any], text: str) -> Any:
    shown = "(hidden)" if p.is_secret else repr(text)
    if p.choices and text.strip() not in p.choices:
        raise ValueError(f"expected one of {', '.join(p.choices)}, got {shown}")
    if p.kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {shown}") from None
        if not math.isfinite(number):
            raise ValueError(f"expected a finite number, got {shown}")
        return number
    if p.kind == "integer":
        try:
            return int(text.strip(), 10)
        except ValueError:
            raise ValueError(f"expected an integer, got {shown}") from None
    if p.kind == "boolean":
        lowered = text.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError(f"expected true/false (or yes/no, 1/0), got {shown}")
    return text


def _fits(p: Parameter[Any], value: object) -> bool:
    if p.kind == "number":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif p.kind == "integer":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif p.kind == "boolean":
        ok = isinstance(value, bool)
    else:
        ok = isinstance(value, str)
    return ok and (not p.choices or str(value) in p.choices)


def default_problem(p: Parameter[Any]) -> str | None:
    """Why ``p``'s default does not fit its kind or options, or ``None`` if it does."""
    value = p.default_value
    if value is UNSET or (value is None and not p.is_array):
        return None
    values = value if p.is_array and isinstance(value, list) else [value]
    if p.is_array and not isinstance(value, list):
        return f"default {value!r} is not a list"
    for item in values:
        if not _fits(p, item):
            return f"default {item!r} is not a valid {p.kind_label}"
    return None


def parse_value(p: Parameter[Any], texts: Sequence[str]) -> Any:
    """Parse supplied text(s) for ``p``; raise ``ValueError`` with a message (no flag prefix)."""
    if p.is_array:
        items = [item.strip() for text in texts for item in text.split(",")]
        return [_parse_scalar(p, item) for item in items if item]
    text = texts[-1]
    if not text.strip():
        raise ValueError("a value is required, got a blank one")
    return _parse_scalar(p, text.strip() if p.kind != "string" else text)


@dataclass
class Resolution:
    """The outcome of resolving every parameter of a build."""

    values: dict[str, Any]
    raw: dict[str, str]
    errors: list[str]
    secrets: list[str]


def resolve(
    params: Sequence[Parameter[Any]],
    supplied: Mapping[str, Sequence[str]],
    env: Mapping[str, str],
    *,
    lenient: bool = False,
) -> Resolution:
    """Resolve each parameter from ``supplied`` (by name), then ``env``, then its default.

    With ``lenient`` a missing required value is not an error (for ``--list``
    and ``graph``, which must work without the run's parameters).
    """
    out = Resolution(values={}, raw={}, errors=[], secrets=[])
    for p in params:
        texts: Sequence[str] | None = supplied.get(p.name)
        if not texts:
            from_env = env.get(p.env_var, "")
            texts = [from_env] if from_env != "" else None
        if texts is not None and p.is_secret:
            out.secrets.extend(t for t in texts if t)
        if texts is None:
            if p.default_value is not UNSET:
                out.values[p.name] = p.default_value
            elif p.is_array:
                if p.is_required and not lenient:
                    out.errors.append(f"{p.flag} is required (or set {p.env_var}).")
                else:
                    out.values[p.name] = []
            elif p.is_required:
                if not lenient:
                    out.errors.append(f"{p.flag} is required (or set {p.env_var}).")
            else:
                out.values[p.name] = None
            continue
        try:
            value = parse_value(p, texts)
        except ValueError as exc:
            out.errors.append(f"{p.flag}: {exc}")
            continue
        if p.is_array and p.is_required and not value and not lenient:
            out.errors.append(f"{p.flag} is required (or set {p.env_var}); got an empty list.")
            continue
        out.values[p.name] = value
        out.raw[p.name] = ",".join(texts) if p.is_array else texts[-1]
    return out


def bind(build: object, params: Sequence[Parameter[Any]], resolution: Resolution) -> None:
    """Store resolved values on ``build`` so ``self.<name>.value`` reads them."""
    for p in params:
        if p.name in resolution.values:
            bound = p.__get__(build, type(build))
            bound.set(resolution.values[p.name], resolution.raw.get(p.name))


def parameter(description: str = "") -> Parameter[str | None]:
    """Declare an optional string parameter; compose with ``.required()``, ``.number()`` …"""
    return Parameter(description=description)
