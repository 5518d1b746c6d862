"""The state-store contract: scenarios every :class:`~zuke.state.StateStore` must pass.

Zuke runs this suite against its own stores, and ships it so that anyone
writing a store (or a server behind the HTTP store) can run it against theirs.
Plug a store in by subclassing :class:`StateStoreContract` in a pytest module
whose class name starts with ``Test``::

    from zuke.testing.store_contract import StateStoreContract

    class TestMyStore(StateStoreContract):
        @pytest.fixture
        def store(self) -> StateStore:
            return MyStore(...)

Hooks a subclass may override:

- ``store`` (fixture, required) — the store under test, fresh or shared.
- ``lapse(store, ttl_ms)`` — on return, a lock taken with ``ttl_ms`` before the
  call must be expired by the *store's* clock. The default advances the store's
  ``clock`` attribute when it is a :class:`~zuke._clock.ManualClock` (no waiting),
  else sleeps ``ttl_ms + lapse_margin_ms`` of wall time (a remote server).
- ``concurrent_store(store, index)`` — the store thread ``index`` of a race uses;
  default the same object. Return separate clients to race separate connections.
- class attributes ``lock_ttl_ms`` (TTL of locks the suite lets lapse; keep it
  short for a wall-clock server), ``lapse_margin_ms``, ``live_ttl_ms`` (TTL of
  locks that must stay live), ``racers`` (threads per race) and
  ``renews_expired_claims`` (set ``False`` only if your store documents that an
  expired claim cannot be renewed even before anyone else acquires it).

Every scenario uses fresh uuid-suffixed run ids, lock keys and target names, so
the suite is safe against a shared, persistent backend. ``append_run``
scenarios are skipped unless the store is a :class:`~zuke.state.JournalingStateStore`.

The scenarios live by subject — ``runs`` (records, journals), ``listing``,
``locks`` — on top of ``support`` (the hooks and sample values); this module
puts them together and re-exports the names tests import from it.
"""

from __future__ import annotations

from zuke.testing.store_contract.listing import ListingScenarios
from zuke.testing.store_contract.locks import LockScenarios
from zuke.testing.store_contract.runs import RunScenarios
from zuke.testing.store_contract.support import (
    UNSAFE_IDS,
    ContractBase,
    fresh,
    rich_record,
    sample_holder,
    sample_record,
)


class StateStoreContract(RunScenarios, ListingScenarios, LockScenarios):
    """Subclass in a ``Test*`` class and provide the ``store`` fixture."""


__all__ = [
    "UNSAFE_IDS",
    "ContractBase",
    "ListingScenarios",
    "LockScenarios",
    "RunScenarios",
    "StateStoreContract",
    "fresh",
    "rich_record",
    "sample_holder",
    "sample_record",
]
