"""``dataclass(frozen=True)`` for the store's values, without compiling methods at import.

:func:`dataclasses.dataclass` compiles six methods per frozen class
(``__init__``, ``__repr__``, ``__eq__``, ``__hash__``, ``__setattr__``,
``__delattr__``) from source when the class is made: about 12 ms for the
seventeen classes of :mod:`.records` and :mod:`._protocol`, paid by every
``zuke`` command, most of which builds two of them. Here the class is the
same dataclass (its fields, defaults and factories as
:func:`dataclasses.fields` and :func:`dataclasses.replace` see them), with
shared ``__repr__``/``__eq__``/``__hash__``/``__setattr__``/``__delattr__``
that behave as the generated ones do, and an ``__init__`` compiled on the
class's first instantiation (the same code ``dataclasses`` writes for a frozen
class: one ``object.__setattr__`` per field).

Modules write ``@dataclass(frozen=True)`` and import this ``dataclass`` at run
time only (``if TYPE_CHECKING`` imports the real one), so type checkers see a
frozen dataclass. Any other option falls back to :func:`dataclasses.dataclass`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar

T = TypeVar("T")

#: each value class -> its fields' names, in order, and a function reading them as a tuple
_KEYS: dict[type, tuple[tuple[str, ...], Callable[[Any], tuple[Any, ...]]]] = {}


class _Factory:
    """ "No value given": the field's ``default_factory`` makes one (shown as dataclasses do)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY: Any = _Factory()


def dataclass(**options: Any) -> Callable[[type[T]], type[T]]:
    """``dataclass(frozen=True)``, cheap at import (see the module docstring)."""
    if options != {"frozen": True}:
        return dataclasses.dataclass(**options)
    return _frozen


def _frozen(cls: type[T]) -> type[T]:
    # Without a docstring, dataclasses writes one from inspect.signature(cls), which here
    # (no __init__ yet) parses object's text signature: tokenize's regex, ~5 ms to compile.
    undocumented = not cls.__doc__
    if undocumented:
        cls.__doc__ = "(set below)"
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    names = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
    if undocumented:
        cls.__doc__ = f"{cls.__name__}({', '.join(names)})"
    _check(cls, names)
    if len(names) > 1:
        key: Callable[[Any], tuple[Any, ...]] = attrgetter(*names)
    else:
        key = (lambda value: ()) if not names else (lambda value: (getattr(value, names[0]),))
    _KEYS[cls] = (names, key)
    for name, method in (
        ("__init__", _first_init),
        ("__repr__", _repr),
        ("__eq__", _eq),
        ("__hash__", _hash),
        ("__setattr__", _setattr),
        ("__delattr__", _delattr),
    ):
        if name in cls.__dict__:
            raise TypeError(f"{cls.__qualname__} defines {name}: use dataclasses.dataclass")
        setattr(cls, name, method)
    return cls


def _check(cls: type, names: tuple[str, ...]) -> None:
    """Refuse what :func:`_make_init` does not write (as ``dataclasses`` would refuse it)."""
    defaulted = False
    for f in dataclasses.fields(cls):
        has_default = f.default is not dataclasses.MISSING
        has_default = has_default or f.default_factory is not dataclasses.MISSING
        if defaulted and not has_default:
            raise TypeError(f"{cls.__qualname__}: non-default argument {f.name!r} follows default")
        defaulted = defaulted or has_default
        if not f.init or f.kw_only or f.name == "self" or f.name.startswith("_"):
            raise TypeError(f"{cls.__qualname__}.{f.name}: a field this decorator does not write")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__}: __post_init__ is not supported here")


def _make_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` ``dataclasses`` writes for a frozen class, compiled once."""
    params, lines = [], []
    namespace: dict[str, Any] = {"_set": object.__setattr__, "_FACTORY": _FACTORY}
    for f in dataclasses.fields(cls):
        value = f.name
        if f.default is not dataclasses.MISSING:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_factory_{f.name}"] = f.default_factory
            params.append(f"{f.name}=_FACTORY")
            value = f"_factory_{f.name}() if {f.name} is _FACTORY else {f.name}"
        else:
            params.append(f.name)
        lines.append(f"    _set(self, {f.name!r}, {value})")
    source = f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"])
    exec(source, namespace)
    init: Callable[..., None] = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__annotations__ = {**{f.name: f.type for f in dataclasses.fields(cls)}, "return": None}
    return init


def _first_init(self: Any, *args: Any, **kwargs: Any) -> None:
    init = _make_init(type(self))
    type.__setattr__(type(self), "__init__", init)  # later instances call it directly
    init(self, *args, **kwargs)


def _repr(self: Any) -> str:
    names = _KEYS[type(self)][0]
    shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
    return f"{type(self).__qualname__}({shown})"


def _eq(self: Any, other: object) -> Any:  # bool, or NotImplemented
    if other.__class__ is not self.__class__:
        return NotImplemented
    key = _KEYS[type(self)][1]
    return bool(key(self) == key(other))


def _hash(self: Any) -> int:
    return hash(_KEYS[type(self)][1](self))


def _setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


__all__ = ["dataclass"]
