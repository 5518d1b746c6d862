"""The store's values are made by ``zuke.state._frozen``: the same frozen dataclasses, cheaper.

Each record and protocol class behaves as ``dataclasses.dataclass(frozen=True)``
would make it: the same fields, defaults and factories, ``__init__`` signature,
repr, equality, hash, ``replace``, refusal to assign, pickling; and importing
them compiles nothing (issue 19: about 12 ms of every command).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import subprocess
import sys
import typing
from typing import Any

import pytest

from zuke.state import _frozen, _protocol, records

CLASSES = [
    value
    for module in (records, _protocol)
    for value in vars(module).values()
    if isinstance(value, type)
    and dataclasses.is_dataclass(value)
    and value.__module__ == module.__name__
]


def _reference(cls: type) -> type:
    """``cls`` as ``dataclasses.dataclass(frozen=True)`` makes it, from the same annotations."""
    namespace: dict[str, Any] = {"__annotations__": dict(cls.__annotations__)}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            namespace[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f.name] = dataclasses.field(default_factory=f.default_factory)
    made = type(cls.__name__, (), namespace)
    made.__qualname__ = cls.__qualname__
    made.__module__ = cls.__module__
    return dataclasses.dataclass(frozen=True)(made)


def _sample(cls: type, salt: str = "") -> dict[str, Any]:
    """A value for every field without a default (strings, or an instance of a value class)."""
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        hint = hints[f.name]
        if hint is int:
            values[f.name] = 7
        elif isinstance(hint, type) and dataclasses.is_dataclass(hint):
            values[f.name] = hint(**_sample(hint, salt))
        else:
            values[f.name] = f"{f.name}{salt}"
    return values


def test_every_value_class_is_made_by_the_cheap_decorator() -> None:
    assert len(CLASSES) >= 17
    assert all(cls in _frozen._KEYS for cls in CLASSES)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_value_class_behaves_as_a_frozen_dataclass(cls: type) -> None:
    ref = _reference(cls)
    values = _sample(cls)
    ours, theirs = cls(**values), ref(**values)
    assert repr(ours) == repr(theirs)
    assert [f.name for f in dataclasses.fields(ours)] == [
        f.name for f in dataclasses.fields(theirs)
    ]
    assert str(inspect.signature(cls)) == str(inspect.signature(ref))
    assert (ours == cls(**values) and ours != cls(**_sample(cls, "x"))) or not values
    assert (ours == theirs) is False  # another class, as between two dataclasses
    assert dataclasses.asdict(ours) == dataclasses.asdict(theirs)
    try:
        expected_hash: int | None = hash(theirs)
    except TypeError:  # a field holds a dict: unhashable, as the dataclass is
        expected_hash = None
    if expected_hash is None:
        with pytest.raises(TypeError):
            hash(ours)
    else:
        assert hash(ours) == hash(cls(**values))
    names = [f.name for f in dataclasses.fields(cls)]
    if names:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(ours, names[0], "changed")
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(ours, names[0])
    assert pickle.loads(pickle.dumps(ours)) == ours
    assert copy.deepcopy(ours) == ours


def test_replace_and_factories_give_fresh_values() -> None:
    first = records.TargetRecord()
    second = records.TargetRecord()
    assert first.meta == {} and first.meta is not second.meta
    changed = dataclasses.replace(first, status="running", meta={"a": 1})
    assert (changed.status, changed.meta, first.status) == ("running", {"a": 1}, "pending")
    assert (
        _protocol.RunQuery() == _protocol.RunQuery()
        and _protocol.Conflict() == _protocol.Conflict()
    )
    assert hash(_protocol.Written("1")) == hash(_protocol.Written("1"))
    with pytest.raises(TypeError, match="missing"):
        records.Signal()  # type: ignore[call-arg]


def test_the_decorator_refuses_what_it_does_not_write() -> None:
    with pytest.raises(TypeError, match="non-default"):

        @_frozen.dataclass(frozen=True)
        class Bad:
            a: int = 1
            b: int  # type: ignore[misc]

    other = _frozen.dataclass(frozen=False)
    assert other is not _frozen._frozen  # any other option: dataclasses' own


def test_a_class_without_a_docstring_gets_one_without_parsing_a_signature() -> None:
    @_frozen.dataclass(frozen=True)
    class Plain:
        a: int
        b: str = "x"

    assert Plain.__doc__ == "Plain(a, b)"
    assert repr(Plain(1)).endswith("Plain(a=1, b='x')")


def test_importing_the_values_compiles_no_dataclass_method() -> None:
    probe = (
        "import builtins, sys, traceback\n"
        "callers = []\n"
        "real = builtins.exec\n"
        "def spy(*args, **kwargs):\n"
        "    if isinstance(args[0], str):  # source text, not a module's code object\n"
        "        callers.append(traceback.extract_stack(limit=2)[0].filename)\n"
        "    return real(*args, **kwargs)\n"
        "builtins.exec = spy\n"
        "import zuke.state._protocol, zuke.state.records\n"
        "builtins.exec = real\n"
        "print(sorted({c.rsplit('/', 1)[-1] for c in callers}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert "dataclasses.py" not in out.stdout, out.stdout  # before: 6 methods a class


def test_a_class_keeps_its_own_methods_and_each_fields_options() -> None:
    @_frozen.dataclass(frozen=True)
    class Custom:
        """A value with its own repr and a field left out of repr and comparison."""

        a: int
        _note: str = dataclasses.field(default="", repr=False, compare=False)

        def __repr__(self) -> str:
            return "custom"

    @_frozen.dataclass(frozen=True)
    class Shown:
        """Fields left out of repr and comparison, as dataclasses leaves them out."""

        a: int
        _note: str = dataclasses.field(default="", repr=False, compare=False)

    assert repr(Custom(1)) == "custom"
    assert repr(Shown(1, "x")).endswith("Shown(a=1)")
    assert Shown(1, "x") == Shown(1, "y") and hash(Shown(1, "x")) == hash(Shown(1, "y"))
    with pytest.raises(TypeError, match="__setattr__"):

        @_frozen.dataclass(frozen=True)
        class Settable:
            a: int

            def __setattr__(self, name: str, value: Any) -> None:
                pass

    @_frozen.dataclass
    class Mutable:
        a: int

    changed = Mutable(1)
    changed.a = 2  # a plain @dataclass is dataclasses' own: mutable
    assert changed == Mutable(2)


def test_the_cheap_replace_gives_what_dataclasses_replace_gives() -> None:
    """``_frozen.replace`` (the writer's, twice a transition) copies the attributes instead
    of calling ``__init__``: the same value, a new object, the original untouched."""
    row = records.TargetRecord(status="running", meta={"a": 1})
    for changes in ({}, {"status": "succeeded"}, {"meta": {}, "error": "x", "interrupted": True}):
        fast = _frozen.replace(row, **changes)
        assert fast == dataclasses.replace(row, **changes) and fast is not row
        assert type(fast) is records.TargetRecord
    assert row.status == "running" and row.meta == {"a": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        _frozen.replace(row, status="failed").status = "running"  # type: ignore[misc]
    with pytest.raises(TypeError, match="nope"):
        _frozen.replace(row, nope=1)  # a name that is no field: dataclasses' own error


def test_the_cheap_replace_hands_other_dataclasses_to_dataclasses_replace() -> None:
    @dataclasses.dataclass(frozen=True)
    class Checked:
        n: int

        def __post_init__(self) -> None:
            if self.n < 0:
                raise ValueError("negative")

    assert _frozen.replace(Checked(1), n=2) == Checked(2)
    with pytest.raises(ValueError, match="negative"):
        _frozen.replace(Checked(1), n=-1)  # its __post_init__ still runs


def test_the_resume_paths_frozen_values_compile_nothing_at_import() -> None:
    """``zuke resume RUN --signal NAME`` imports these modules; each frozen dataclass of
    theirs is made by ``zuke.state._frozen`` (issue 28 §3: ~0.5 ms of exec'd methods a
    class by ``dataclasses``)."""
    import dataclasses
    import importlib

    from zuke.state import _frozen

    modules = (
        "zuke._engine.gate_cancel", "zuke._engine.compensation", "zuke.state.update",
        "zuke.runs.outcome", "zuke.runs.continuation", "zuke.runs.signals",
        "zuke.runs.timeouts", "zuke._engine.durable", "zuke._engine.claims",
        "zuke._engine.resumed",
    )  # fmt: skip
    found = 0
    for name in modules:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == name:
                if dataclasses.is_dataclass(value):  # dataclasses' own frozen: compiled
                    params = value.__dataclass_params__  # type: ignore[attr-defined]
                    assert not params.frozen, f"{name}.{value.__qualname__}"
                found += value in _frozen._FIELDS
    assert found >= 14


def test_an_init_stores_fields_into_the_dict_only_where_setattr_would_do_the_same() -> None:
    """Issue 28 §1: the compiled ``__init__`` writes a plain class's fields straight into
    its ``__dict__`` (under half ``object.__setattr__``'s cost); a class with slots, or a
    field's name that is a data descriptor of the class, keeps ``object.__setattr__``."""
    import dataclasses

    from zuke.state._frozen import _stores_directly
    from zuke.state._frozen import dataclass as frozen_dataclass

    @frozen_dataclass(frozen=True)
    class Plain:
        a: int
        b: list[int] = dataclasses.field(default_factory=list)

    value = Plain(1)
    assert value.__dict__ == {"a": 1, "b": []} and value == Plain(1, [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.a = 2  # type: ignore[misc]
    assert _stores_directly(Plain, ["a", "b"])

    @frozen_dataclass(frozen=True)
    class Slotted:
        __slots__ = ("a",)
        a: int

    assert Slotted(3).a == 3 and not _stores_directly(Slotted, ["a"])

    class Described:
        @property
        def a(self) -> int:
            return 1

        @a.setter
        def a(self, value: int) -> None:
            pass

    assert not _stores_directly(Described, ["a"])


def test_a_bare_dataclass_is_a_mutable_dataclass_as_dataclasses_makes_it() -> None:
    """Issue 28 §1: ``@dataclass`` (the run's options, the CLI's arguments, a loaded build)
    made without compiling methods at import; what ``dataclasses`` would make in every
    way a caller sees: init with defaults and factories, repr, eq, unhashable, assignable,
    fields and replace; one with ``__post_init__`` is ``dataclasses``' own."""
    import dataclasses

    from zuke.state._frozen import _MUTABLE
    from zuke.state._frozen import dataclass as lean_dataclass

    def make(decorate: Any) -> Any:
        @decorate
        class Options:
            name: str
            tags: list[str] = dataclasses.field(default_factory=list)
            limit: int = 3

        return Options

    lean, real = make(lean_dataclass), make(dataclasses.dataclass)
    assert lean in _MUTABLE
    for cls in (lean, real):
        value = cls("a")
        assert repr(value).endswith("Options(name='a', tags=[], limit=3)")
        assert value == cls("a", [], 3) and value != cls("b")
        assert cls.__hash__ is None
        value.limit = 4
        assert value.limit == 4 and value.tags is not cls("a").tags
        assert [f.name for f in dataclasses.fields(value)] == ["name", "tags", "limit"]
        assert dataclasses.replace(value, name="c") == cls("c", [], 4)
        assert dataclasses.asdict(value) == {"name": "a", "tags": [], "limit": 4}

    class Watched:
        seen: list[str] = []

        def __setattr__(self, name: str, value: Any) -> None:
            Watched.seen.append(name)
            object.__setattr__(self, name, value)

    @lean_dataclass
    class Own(Watched):
        a: int

    assert Own(1).a == 1 and Watched.seen == ["a"]  # its own __setattr__ still runs

    @lean_dataclass
    class Checked:
        a: int

        def __post_init__(self) -> None:
            self.a += 1

    assert Checked(1).a == 2 and Checked not in _MUTABLE
