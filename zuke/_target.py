"""Authoring targets: the ``@target`` decorator, the fluent builder and target handles.

A build declares a target with a definition method::

    @target
    def deploy(self, t):
        return t.depends_on(self.build).executes(self._apply)

Reading ``self.deploy`` on a build instance gives a :class:`Target` handle: a
reference by name, so a forward reference to a target declared further down
just works. The engine never sees a builder: :mod:`zuke._engine.plan` freezes
each builder into an immutable spec before a run.
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from zuke._duration import Duration, parse_duration
from zuke._errors import BuildDefinitionError
from zuke._target_handle import Target as Target  # re-exported: the handle was born here

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # frozen dataclasses without compiling six methods each at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

if TYPE_CHECKING:
    from zuke._fan_out import ForEachSettings
    from zuke._lock_settings import LockSettings
    from zuke._waits import WaitSettings

B = TypeVar("B")

_EFFECT_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")


class TargetBuilder:
    """Configures one target fluently; every method returns the builder."""

    def __init__(self, name: str | None = None) -> None:
        self.name = name
        self._description = ""
        self._depends_on: list[Target] = []
        self._body: Callable[..., Any] | None = None
        self._timeout_ms: int | None = None
        self._retries = 0
        self._retry_delay_ms = 0
        self._proceed_after_failure = False
        self._lock: Callable[[LockSettings], Any] | None = None
        self._wait: Callable[[WaitSettings], Any] | None = None
        self._effects: list[tuple[str, Callable[..., Any]]] = []
        self._on_cancel: Target | TargetBuilder | None = None
        #: ``environment(name, url)``: where this target deploys
        self._environment: str | None = None
        self._environment_url: str | Callable[[Any], Any] | None = None
        #: ``for_each(items, factory, configure)``: the fan-out, if this target is one
        self._for_each: (
            tuple[Callable[[], Any], Callable[[Any, int], Any], Callable[[ForEachSettings], Any]]
            | None
        ) = None

    def description(self, text: str) -> TargetBuilder:
        """Shown in ``--list``, help and the graph."""
        self._description = str(text)
        return self

    def depends_on(self, *targets: Target) -> TargetBuilder:
        """Targets that must succeed before this one runs."""
        for t in targets:
            self._depends_on.append(_as_handle(t, f"{self._label()}.depends_on()"))
        return self

    def executes(self, body: Callable[..., Any]) -> TargetBuilder:
        """The body: ``f()`` or ``f(ctx)``, sync or ``async``."""
        if not callable(body):
            raise BuildDefinitionError(f"{self._label()}.executes() needs a callable, got {body!r}")
        self._body = body
        return self

    def timeout(self, duration: Duration) -> TargetBuilder:
        """Fail an attempt of the body that runs longer than ``duration``."""
        self._timeout_ms = parse_duration(duration, what=f"{self._label()}.timeout()")
        return self

    def retry(self, times: int, delay: Duration = 0) -> TargetBuilder:
        """Run a failing body up to ``times`` more times, ``delay`` apart."""
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise BuildDefinitionError(
                f"{self._label()}.retry(): times must be a whole number >= 0, got {times!r}"
            )
        self._retries = times
        self._retry_delay_ms = parse_duration(
            delay, what=f"{self._label()}.retry() delay", allow_zero=True
        )
        return self

    def proceed_after_failure(self) -> TargetBuilder:
        """A failure here is reported but does not fail the run; dependents still run."""
        self._proceed_after_failure = True
        return self

    def lock(self, configure: Callable[[LockSettings], Any]) -> TargetBuilder:
        """Guard the target with a cross-run lock; ``configure(s)`` runs after params resolve."""
        if not callable(configure):
            raise BuildDefinitionError(f"{self._label()}.lock() needs a function of the settings")
        self._lock = configure
        return self

    def waits_for(self, configure: Callable[[WaitSettings], Any]) -> TargetBuilder:
        """Make this a bodyless gate: ``configure(s)`` sets ``s.on(trigger)``, and optionally
        ``s.timeout(...)`` and ``s.on_timeout(...)``."""
        if not callable(configure):
            raise BuildDefinitionError(
                f"{self._label()}.waits_for() needs a function of the settings"
            )
        self._wait = configure
        return self

    def effect(self, name: str, body: Callable[..., Any]) -> TargetBuilder:
        """A crash-durable side effect, run after the body: its intent is recorded (and
        fsynced) before it runs, and an effect that completed is never run again."""
        if not isinstance(name, str) or not _EFFECT_NAME.fullmatch(name):
            raise BuildDefinitionError(
                f"{self._label()}.effect(): the name must be 1-64 characters from "
                f"[A-Za-z0-9._-], got {name!r}"
            )
        if any(existing == name for existing, _ in self._effects):
            raise BuildDefinitionError(f"{self._label()}: two effects are named {name!r}")
        if not callable(body):
            raise BuildDefinitionError(f"{self._label()}.effect({name!r}) needs a callable")
        self._effects.append((name, body))
        return self

    def environment(
        self, name: str, *, url: str | Callable[[Any], Any] | None = None
    ) -> TargetBuilder:
        """This target deploys to the environment ``name`` (``"staging"``; a fan-out stage
        names its item's, ``f"production-{region}"``), reached at ``url``: a string, or a
        function of ``ctx`` called as the target starts. The body may also set
        ``ctx.environment_url`` once it knows it. Recorded on the target's row and shown by
        ``zuke runs show``, the graph, MCP and the web view; reporters (``zuke_gh``'s
        deployments) mirror it (see docs/authoring.md)."""
        from zuke._environment import name_problem, url_problem

        problem = name_problem(name)
        if problem is None and url is not None and not callable(url):
            problem = url_problem(url)
        if problem is not None:
            raise BuildDefinitionError(f"{self._label()}.environment(): {problem}")
        self._environment = name
        self._environment_url = url
        return self

    def on_cancel(self, compensation: Target | TargetBuilder) -> TargetBuilder:
        """Undo this target when its run is cancelled: ``compensation`` runs if and only if
        this target succeeded, with this target's ``ctx.state`` (see docs/cancellation.md).

        A fan-out stage may also name a free ``target()`` builder, which sees the
        item through its closure (see docs/fan-out.md)."""
        if isinstance(compensation, TargetBuilder) and compensation.name is None:
            self._on_cancel = compensation
        else:
            self._on_cancel = _as_handle(compensation, f"{self._label()}.on_cancel()")
        return self

    def for_each(
        self,
        items: Callable[[], Any],
        factory: Callable[[Any, int], Any],
        configure: Callable[[ForEachSettings], Any] | None = None,
    ) -> TargetBuilder:
        """Fan out: run the stages ``factory(item, index)`` returns for every item of
        ``items()`` (read when the target runs), each item's stages in order, up to
        ``s.concurrency(n)`` items at once (see docs/fan-out.md)."""
        where = f"{self._label()}.for_each()"
        if not callable(items):
            raise BuildDefinitionError(
                f"{where}: items must be a function returning the items (lambda: "
                f"self.repos.value), got {items!r}"
            )
        if not callable(factory):
            raise BuildDefinitionError(
                f"{where}: factory must be a function of (item, index) returning the stages"
            )
        if configure is not None and not callable(configure):
            raise BuildDefinitionError(f"{where}: configure must be a function of the settings")
        self._for_each = (items, factory, configure or (lambda s: None))
        return self

    def _label(self) -> str:
        return f"target {self.name!r}" if self.name else "target()"


def _as_handle(value: object, where: str) -> Target:
    if isinstance(value, Target):
        return value
    if isinstance(value, TargetDefinition):
        return Target(value.name)
    if isinstance(value, str):
        raise BuildDefinitionError(
            f"{where}: got the string {value!r}; pass a target handle such as self.{value}"
        )
    if isinstance(value, TargetBuilder):
        raise BuildDefinitionError(
            f"{where}: got a builder; pass a target handle such as self.<name> "
            "(free target() builders are only for fan-out stages)"
        )
    raise BuildDefinitionError(f"{where}: expected a target handle, got {value!r}")


class TargetDefinition(Generic[B]):
    """The descriptor ``@target`` puts on a build class."""

    def __init__(self, define: Callable[[B, TargetBuilder], TargetBuilder | None]) -> None:
        self.define = define
        self.name = define.__name__
        self.__doc__ = define.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, instance: None, owner: type) -> TargetDefinition[B]: ...
    @overload
    def __get__(self, instance: object, owner: type) -> Target: ...
    def __get__(self, instance: object | None, owner: type) -> TargetDefinition[B] | Target:
        if instance is None:
            return self
        return Target(self.name)

    def build(self, instance: B) -> TargetBuilder:
        """Run the definition method with a fresh builder and return the configured builder."""
        builder = TargetBuilder(self.name)
        returned = self.define(instance, builder)
        if returned is None:
            return builder
        if not isinstance(returned, TargetBuilder):
            raise BuildDefinitionError(
                f"target {self.name!r}: the definition must return its builder "
                f"(return t.executes(...)), got {type(returned).__name__}"
            )
        if returned.name is None:
            returned.name = self.name
        elif returned is not builder:
            raise BuildDefinitionError(
                f"target {self.name!r}: the definition returned the builder of {returned.name!r}"
            )
        return returned


@overload
def target() -> TargetBuilder: ...
@overload
def target(define: Callable[[B, TargetBuilder], TargetBuilder | None]) -> TargetDefinition[B]: ...
def target(
    define: Callable[[B, TargetBuilder], TargetBuilder | None] | None = None,
) -> TargetBuilder | TargetDefinition[B]:
    """``@target`` declares a target method; ``target()`` returns a free (fan-out stage) builder."""
    if define is None:
        return TargetBuilder()
    if not callable(define):
        raise BuildDefinitionError(f"@target decorates a method, got {define!r}")
    return TargetDefinition(define)


def definitions_of(cls: type) -> list[TargetDefinition[Any]]:
    """The target definitions of ``cls`` and its bases, base classes first, in declaration order."""
    seen: dict[str, TargetDefinition[Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, TargetDefinition):
                seen.pop(name, None)
                seen[name] = value
    return list(seen.values())


@dataclass(frozen=True)
class BodySpec:
    """A body and how to call it."""

    fn: Callable[..., Any]
    takes_ctx: bool
    is_async: bool


def _plain_shape(fn: Callable[..., Any]) -> tuple[bool, bool] | None:
    """(takes_ctx, is_async) of a plain function or bound method, read off its code object.

    What :func:`inspect.signature` would say, without building a signature for
    each of a build's thousand lambdas. ``None`` for anything else (a
    ``functools.wraps`` wrapper, a ``__signature__``, a partial, a callable
    object, a body that requires two arguments): inspected as before.
    """
    bound = type(fn) is types.MethodType
    func = fn.__func__ if bound else fn  # type: ignore[attr-defined]
    if type(func) is not types.FunctionType or func.__dict__:
        return None
    code = func.__code__
    positional = code.co_argcount - bound
    if positional < 0:
        return None
    required = max(0, positional - len(func.__defaults__ or ()))
    if required > 1:
        return None  # an error: its message comes from the full inspection
    varargs = bool(code.co_flags & inspect.CO_VARARGS)
    is_async = bool(code.co_flags & inspect.CO_COROUTINE)
    return positional > 0 or varargs, is_async


def body_spec(fn: Callable[..., Any], where: str) -> BodySpec:
    """Inspect ``fn`` once: does it take ``ctx``, is it a coroutine function?"""
    shape = _plain_shape(fn)
    if shape is not None:
        return BodySpec(fn, takes_ctx=shape[0], is_async=shape[1])
    return _inspect_body(fn, where)


def _inspect_body(fn: Callable[..., Any], where: str) -> BodySpec:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return BodySpec(fn, takes_ctx=False, is_async=inspect.iscoroutinefunction(fn))
    positional = [
        p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values())
    required = [p for p in positional if p.default is p.empty]
    if len(required) > 1:
        raise BuildDefinitionError(
            f"{where}: a body takes no argument or one (ctx); "
            f"{getattr(fn, '__name__', fn)!r} requires {len(required)}"
        )
    is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - callable objects with async __call__
    )
    return BodySpec(fn, takes_ctx=bool(positional) or varargs, is_async=is_async)
