"""Parameters: declaration (``parameter()``) and resolution (parsing is in ``_param_parse``).

A parameter is declared as a class attribute of a build and read on the
instance as ``self.name.value``. Declarations are immutable: each fluent call
returns a new :class:`Parameter`, so a declaration can be shared safely.

Values come from ``--name value`` flags (repeatable for arrays), else the
environment variable ``NAME``, else the default. Every value is parsed and
validated before any target runs; all problems are reported together in one
:class:`~zuke.ParameterError`. A secret's value never appears in an error,
nor does a secret handed to another parameter; every form a secret can take
(each element of a list, a number's spelling, a default) is collected in
:attr:`Resolution.secrets` for the run's :class:`~zuke._redact.Redactor`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import field, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar, cast, overload

from zuke._errors import ParameterError
from zuke._param_parse import UNSET, parse_value, secret_forms, short_secret
from zuke._redact import MIN_SECRET_LENGTH, Redactor
from zuke._text import has_lone_surrogate

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

T = TypeVar("T")
Kind = Literal["string", "number", "integer", "boolean"]


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

    def __repr__(self) -> str:
        # A secret's default is a secret too: never in a repr (an error may quote one).
        default = "(hidden)" if self.is_secret and self.default_value is not UNSET else None
        shown = default or repr(self.default_value)
        return (
            f"Parameter(name={self.name!r}, kind={self.kind!r}, array={self.is_array}, "
            f"secret={self.is_secret}, default={shown})"
        )

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

    def __repr__(self) -> str:
        shown = "(hidden)" if self.spec.is_secret else repr(self._value)
        return f"BoundParameter({self.spec.flag}={shown})"

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


@dataclass
class Resolution:
    """The outcome of resolving every parameter of a build."""

    values: dict[str, Any]
    raw: dict[str, str]
    errors: list[str]
    secrets: list[str]

    def problem(self) -> str:
        """Every error, on one line: ``Invalid or missing parameters: a; b``."""
        noun = "parameter" if len(self.errors) == 1 else "parameters"
        return f"Invalid or missing {noun}: " + "; ".join(self.errors)


def _supplied(
    p: Parameter[Any], supplied: Mapping[str, Sequence[str]], env: Mapping[str, str]
) -> Sequence[str] | None:
    texts: Sequence[str] | None = supplied.get(p.name)
    if not texts:
        from_env = env.get(p.env_var, "")
        texts = [from_env] if from_env != "" else None
    return texts


def _supplied_secrets(
    params: Sequence[Parameter[Any]], supplied: Mapping[str, Sequence[str]], env: Mapping[str, str]
) -> list[str]:
    """The texts given to secret parameters, whole and element by element, before parsing."""
    found: list[str] = []
    for p in params:
        texts = _supplied(p, supplied, env) if p.is_secret else None
        for text in texts or ():
            found.append(text)
            found.append(text.strip())
            if p.is_array:
                found.extend(item.strip() for item in text.split(","))
    return [t for t in found if t]


def resolve(
    params: Sequence[Parameter[Any]],
    supplied: Mapping[str, Sequence[str]],
    env: Mapping[str, str],
    *,
    lenient: bool = False,
) -> Resolution:
    """Resolve each parameter from ``supplied`` (by name), then ``env``, then its default.

    With ``lenient`` a missing required value is not an error (for ``--list``
    and ``graph``, which must work without the run's parameters). Every error
    is redacted: a secret handed to another parameter is not quoted back.
    """
    out = Resolution(values={}, raw={}, errors=[], secrets=_supplied_secrets(params, supplied, env))
    for p in params:
        texts = _supplied(p, supplied, env)
        if texts is None:
            if p.default_value is not UNSET:
                out.values[p.name] = p.default_value
            elif p.is_array:
                if p.is_required and not lenient:
                    out.errors.append(f"{p.flag} is required (or set {p.env_var})")
                else:
                    out.values[p.name] = []
            elif p.is_required:
                if not lenient:
                    out.errors.append(f"{p.flag} is required (or set {p.env_var})")
            else:
                out.values[p.name] = None
            if p.is_secret and p.name in out.values:
                out.secrets.extend(secret_forms(out.values[p.name]))
            continue
        if has_lone_surrogate(texts):
            out.errors.append(f"{p.flag}: the value holds a lone surrogate, which is not text")
            continue
        try:
            value = parse_value(p, texts)
        except ValueError as exc:
            out.errors.append(f"{p.flag}: {exc}")
            continue
        if p.is_secret:
            forms = [*secret_forms(value), *(t.strip() for t in texts if not p.is_array)]
            out.secrets.extend(forms)
            short = short_secret(p, forms)
            if short:
                out.errors.append(short)
                continue
        if p.is_array and p.is_required and not value and not lenient:
            out.errors.append(f"{p.flag} is required (or set {p.env_var}); got an empty list")
            continue
        out.values[p.name] = value
        out.raw[p.name] = ",".join(texts) if p.is_array else texts[-1]
    # A refused short secret is not masked either: masking it would garble every message.
    out.secrets = [s for s in out.secrets if len(s) >= MIN_SECRET_LENGTH]
    redactor = Redactor(out.secrets)
    out.errors = [redactor.text(e) for e in out.errors]
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
