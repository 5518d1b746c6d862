"""Fan-out vocabulary: ``for_each`` settings and the names of sub-targets.

A fan-out's items are known only when it runs, so its sub-targets are named
from the items: ``parent[item].stage``, nested as
``parent[item].stage[inner].stage``. The item's text is kept readable and
made safe by percent-encoding every byte outside ``[A-Za-z0-9._-]``
(``acme/app`` becomes ``acme%2Fapp``), which is also reversible:
:func:`decode_key` gives the text back. An item that is not a string, a
number or a boolean is keyed by its index; an empty key becomes ``#index``
and a repeated one ``key#index``, so every name is unique (``#`` itself is
always encoded in an item's text).

A secret never names anything: an item whose text holds the value of a secret
parameter (any form the run's :class:`~zuke._redact.Redactor` knows) is keyed
``#index`` like an empty one, which says nothing about it and is the same in
every process that resolves the same secrets (a resume, a sweep, a cancel's
walk), so its sub-targets keep their names across processes.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from zuke._configure import configured
from zuke._errors import BuildDefinitionError
from zuke._redact import Redactor

if TYPE_CHECKING:
    from dataclasses import dataclass
else:  # a frozen dataclass without compiling its methods at import (zuke.state._frozen)
    from zuke.state._frozen import dataclass

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
STAGE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ForEachSettings:
    """What ``for_each``'s ``configure`` gets: ``s.concurrency(3).continue_on_item_failure()``."""

    def __init__(self, target: str) -> None:
        self._target = target
        self._concurrency = os.cpu_count() or 1
        self._continue = False

    def concurrency(self, limit: int) -> ForEachSettings:
        """At most ``limit`` items at once (clamped to at least 1; default: the CPU count)."""
        if isinstance(limit, bool) or not isinstance(limit, (int, float)):
            raise BuildDefinitionError(
                f"fan-out {self._target!r}: concurrency() takes a number, got {limit!r}"
            )
        self._concurrency = max(1, int(limit))
        return self

    def continue_on_item_failure(self, on: bool = True) -> ForEachSettings:
        """A failed item skips only its own later stages; the other items go on."""
        self._continue = bool(on)
        return self

    def freeze(self, items: Callable[[], Any], factory: Callable[[Any, int], Any]) -> FanOutSpec:
        return FanOutSpec(items, factory, self._concurrency, self._continue)


@dataclass(frozen=True)
class FanOutSpec:
    """A fan-out's frozen settings; its items and stages are materialised when it runs."""

    items: Callable[[], Any]
    factory: Callable[[Any, int], Any]
    concurrency: int
    continue_on_item_failure: bool
    #: the run's secrets: an item holding one is keyed by its index (set when the build loads)
    secrets: Redactor = field(default_factory=Redactor, repr=False, compare=False)


def freeze_fan_out(
    target: str,
    items: Callable[[], Any],
    factory: Callable[[Any, int], Any],
    configure: Callable[[ForEachSettings], Any],
) -> FanOutSpec:
    """Run ``configure`` (at load: a bad setting fails the load) and freeze the fan-out."""
    settings = configured(
        ForEachSettings(target), configure, f"fan-out {target!r}: its for_each() settings"
    )
    return settings.freeze(items, factory)


def encode_key(text: str) -> str:
    """``text`` with every byte outside ``[A-Za-z0-9._-]`` percent-encoded (reversible)."""
    if all(c in _SAFE for c in text):
        return text
    return "".join(c if c in _SAFE else "".join(f"%{b:02X}" for b in c.encode()) for c in text)


def decode_key(key: str) -> str | None:
    """The item text an encoded key stands for (a ``#index`` suffix is dropped); ``None``
    for a key that is an index alone (``#2``: an empty item, or one holding a secret)."""
    text = key.split("#", 1)[0]
    if not text and key:
        return None
    return unquote(text, errors="strict")


def item_keys(items: Iterable[Any], secrets: Redactor | None = None) -> list[str]:
    """The keys of ``items``, in order: unique, readable, safe, and never a secret's value
    (an item whose text holds one of ``secrets`` is keyed ``#index``)."""
    keys: list[str] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        text: str | None = None
        if isinstance(item, str):
            text = item
        elif isinstance(item, bool):
            text = "true" if item else "false"
        elif isinstance(item, (int, float)):
            text = str(item)
        key = str(index) if text is None else encode_key(text)
        if not key or (text is not None and secrets and _reveals(secrets, text, key)):
            key = f"#{index}"
        elif key in seen:
            key = f"{key}#{index}"
        seen.add(key)
        keys.append(key)
    return keys


def _reveals(secrets: Redactor, text: str, key: str) -> bool:
    """Whether an item's text or its key holds a secret (raw or percent-encoded)."""
    return secrets.reveals(text) or secrets.reveals(key, normalise=encode_key)


def sub_name(parent: str, key: str, stage: str) -> str:
    """``parent[key].stage``."""
    return f"{parent}[{key}].{stage}"


def split_sub_name(name: str) -> tuple[str, str, str] | None:
    """``parent[key].stage`` → ``(parent, key, stage)``, for the innermost fan-out, or ``None``.

    ``parent`` may itself be a sub-target (a nested fan-out): split it again.
    """
    if not name.endswith("]") and "]." in name:
        head, _, stage = name.rpartition("].")
        parent, bracket, key = head.rpartition("[")
        if bracket and parent and STAGE_NAME.fullmatch(stage) and "[" not in key:
            return parent, key, stage
    return None


def top_level(name: str) -> str:
    """The declared target a (possibly nested) sub-target belongs to."""
    return name.split("[", 1)[0]


def grouped(names: Iterable[str]) -> list[str]:
    """``names`` with each fan-out's sub-targets right after it, item by item (items and
    stages in the order first seen), nested fan-outs likewise; others keep their order."""
    order = list(dict.fromkeys(names))
    children: dict[str, dict[str, list[str]]] = {}
    top: list[str] = []
    for name in order:
        split = split_sub_name(name)
        if split is None:
            top.append(name)
            continue
        parent, key, _ = split
        children.setdefault(parent, {}).setdefault(key, []).append(name)
    if not children:  # no sub-target: nothing moves (a run without a fan-out)
        return order
    out: list[str] = []
    seen: set[str] = set()

    def visit(name: str) -> None:
        stack = [name]
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            out.append(current)
            subs = [n for stages in children.get(current, {}).values() for n in stages]
            stack.extend(reversed(subs))

    for name in top:
        visit(name)
    for name in order:  # sub-targets whose fan-out has no row of its own
        visit(name)
    return out
