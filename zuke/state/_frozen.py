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
from typing import Any, TypeVar, dataclass_transform

T = TypeVar("T")

#: each value class -> the names its repr shows, and functions reading the fields it compares
#: and hashes as tuples
_KEYS: dict[type, tuple[tuple[str, ...], Callable[[Any], Any], Callable[[Any], Any]]] = {}


class _Factory:
    """Stands for "no value given": the field's ``default_factory`` makes one (shown as
    dataclasses show it)."""

    def __repr__(self) -> str:
        return "<factory>"


_FACTORY: Any = _Factory()

#: each value class -> its field names (what :func:`replace` accepts)
_FIELDS: dict[type, frozenset[str]] = {}


def replace(obj: T, /, **changes: Any) -> T:
    """:func:`dataclasses.replace` for a class made here, about four times cheaper.

    ``dataclasses.replace`` walks the fields, reads each one and calls
    ``__init__`` (one ``object.__setattr__`` a field); a run's writer replaces a
    target row twice a transition and the run record once a write. A class
    made here has only ``init`` fields and no ``__post_init__`` (refused at
    creation), so the same result is the instance's attributes with
    ``changes`` over them. Anything else goes to ``dataclasses.replace``.
    """
    cls = type(obj)
    names = _FIELDS.get(cls)
    if names is None or not names.issuperset(changes):  # not ours, or a bad name: its error
        return dataclasses.replace(obj, **changes)  # type: ignore[type-var]
    new: T = object.__new__(cls)
    attrs = new.__dict__
    attrs.update(obj.__dict__)
    attrs.update(changes)
    return new


@dataclass_transform(field_specifiers=(dataclasses.field, dataclasses.Field))
def dataclass(cls: type[Any] | None = None, /, **options: Any) -> Any:
    """``dataclass(frozen=True)`` and a bare ``@dataclass``, cheap at import (see the module
    docstring); a bare one with a ``__post_init__``, or other options, is
    :func:`dataclasses.dataclass` itself."""
    if cls is not None and not options and not hasattr(cls, "__post_init__"):
        return _make(cls, frozen=False)
    if cls is not None or options != {"frozen": True}:
        return dataclasses.dataclass(cls, **options)
    return _frozen


#: the classes made here that are not frozen (plain ``@dataclass``): their fields assignable
_MUTABLE: set[type] = set()


def _frozen(cls: type[T]) -> type[T]:
    return _make(cls, frozen=True)


def _make(cls: type[T], *, frozen: bool) -> type[T]:
    """The dataclass ``cls``: frozen, or (a bare ``@dataclass``, issue 28 §1) mutable, with
    ``dataclasses``' ``__init__``, ``__repr__`` and ``__eq__`` and no ``__hash__``."""
    # Without a docstring, dataclasses writes one from inspect.signature(cls), which here
    # (no __init__ yet) parses object's text signature: tokenize's regex, ~5 ms to compile.
    undocumented = not cls.__doc__
    if undocumented:
        cls.__doc__ = "(set below)"
    cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    _check(cls, fields)
    if undocumented:
        cls.__doc__ = f"{cls.__name__}({', '.join(f.name for f in fields)})"
    compared = [f.name for f in fields if f.compare]
    hashed = [f.name for f in fields if (f.compare if f.hash is None else f.hash)]
    _KEYS[cls] = (tuple(f.name for f in fields if f.repr), _getter(compared), _getter(hashed))
    _FIELDS[cls] = frozenset(f.name for f in fields)
    own = cls.__dict__
    if not frozen:  # eq without frozen: unhashable, as dataclasses makes it
        _MUTABLE.add(cls)
        plain: tuple[tuple[str, Callable[..., Any]], ...] = (
            ("__init__", _first_init), ("__repr__", _repr), ("__eq__", _eq)
        )  # fmt: skip
        for name, fn in plain:
            if name not in own:
                setattr(cls, name, fn)
        if "__hash__" not in own or own["__hash__"] is None:
            cls.__hash__ = None  # type: ignore[assignment]
        return cls
    # as dataclasses does: a method the class defines is kept (a __hash__ only if it is not
    # the None that defining __eq__ implies), and a frozen class may not define __setattr__
    explicit_hash = "__hash__" in own and not (own["__hash__"] is None and "__eq__" in own)
    for name, method in (
        ("__init__", _first_init),
        ("__repr__", _repr),
        ("__eq__", _eq),
        ("__hash__", None if explicit_hash else _hash),
        ("__setattr__", _setattr),
        ("__delattr__", _delattr),
    ):
        if name in ("__setattr__", "__delattr__") and name in own:
            raise TypeError(f"Cannot overwrite attribute {name} in class {cls.__name__}")
        if method is not None and (name not in own or name == "__hash__"):
            setattr(cls, name, method)
    return cls


def _getter(names: list[str]) -> Callable[[Any], tuple[Any, ...]]:
    """A function reading ``names`` off a value as a tuple (C speed for two or more)."""
    if len(names) > 1:
        return attrgetter(*names)
    if names:
        name = names[0]
        return lambda value: (getattr(value, name),)
    return lambda value: ()


def _check(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> None:
    """Refuse what :func:`_make_init` does not write (as ``dataclasses`` would refuse it)."""
    defaulted = False
    for f in fields:
        has_default = f.default is not dataclasses.MISSING
        has_default = has_default or f.default_factory is not dataclasses.MISSING
        if defaulted and not has_default:
            raise TypeError(f"{cls.__qualname__}: non-default argument {f.name!r} follows default")
        defaulted = defaulted or has_default
        reserved = f.name in ("self", "_set", "_d", "_FACTORY") or f.name.startswith(
            ("_default_", "_factory_")
        )
        if not f.init or f.kw_only or reserved:
            raise TypeError(f"{cls.__qualname__}.{f.name}: a field this decorator does not write")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__qualname__}: __post_init__ is not supported here")


def _stores_directly(cls: type, names: list[str]) -> bool:
    """Whether an instance's fields may be written straight into its ``__dict__``: the
    instances have one (no ``__slots__``) and no field's name is a data descriptor of the
    class (a property, a slot), which ``object.__setattr__`` would call."""
    if "__dict__" not in dir(cls) or any(hasattr(c, "__slots__") for c in cls.__mro__[:-1]):
        return False
    return not any(hasattr(type(getattr(cls, n, None)), "__set__") for n in names)


def _make_init(cls: type) -> Callable[..., None]:
    """The ``__init__`` ``dataclasses`` writes for a frozen class, compiled once.

    Where it may (:func:`_stores_directly`), each field is a store into the instance's
    ``__dict__`` — the same result as ``object.__setattr__`` for a plain attribute, at
    under half the cost (issue 28 §1: a 1000-target chain makes ~6,000 such values)."""
    names = [f.name for f in dataclasses.fields(cls)]
    own_setattr = cls in _MUTABLE and getattr(cls, "__setattr__") is not object.__setattr__  # noqa: B009
    direct = not own_setattr and _stores_directly(cls, names)
    params, lines = [], ["    _d = self.__dict__"] if direct else []
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
        if direct:
            lines.append(f"    _d[{f.name!r}] = {value}")
        elif cls in _MUTABLE:  # as dataclasses writes it: the class's own __setattr__ counts
            lines.append(f"    self.{f.name} = {value}")
        else:
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
    return hash(_KEYS[type(self)][2](self))


def _setattr(self: Any, name: str, value: Any) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _delattr(self: Any, name: str) -> None:
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


__all__ = ["dataclass", "replace"]
