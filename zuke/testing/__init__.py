"""Test helpers that zuke ships for its own tests and for third parties.

:mod:`zuke.testing.store_contract` is the shared contract suite every
:class:`~zuke.state.StateStore` must pass; subclass its
:class:`~zuke.testing.store_contract.StateStoreContract` in a test module.
That module imports pytest, so it is loaded only on first use of one of its
names here: ``import zuke`` and ``import zuke.testing`` never import pytest.
:mod:`zuke.testing.serve` waits for a real ``zuke serve`` process to listen;
:mod:`zuke.testing.conformance` checks a running state service over HTTP
(``python -m zuke.testing.conformance --url BASE``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from zuke.testing.store_contract import StateStoreContract, sample_holder, sample_record

_LAZY = frozenset({"StateStoreContract", "sample_holder", "sample_record"})


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from zuke.testing import store_contract

        return getattr(store_contract, name)
    raise AttributeError(f"module 'zuke.testing' has no attribute {name!r}")


__all__ = ["StateStoreContract", "sample_holder", "sample_record"]
