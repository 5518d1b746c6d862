"""Lock scenarios: acquire, renew, release, expiry takeover, fences, ``list_locks``,
``break_lock``, TTL bounds.

A store without ``break_lock`` (newer than the rest of the protocol) skips its scenarios.

Also the lock-key safety scenario: every lock method refuses an unsafe key.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from zuke._errors import UnsafeIdError
from zuke.state._protocol import RUN_LEASE_PREFIX, LockAcquired, LockEntry, LockHeld, StateStore
from zuke.state.lock_rules import MAX_TTL_MS
from zuke.testing.store_contract.support import (
    UNSAFE_IDS,
    ContractBase,
    fresh,
    race,
    sample_holder,
    sample_record,
)


class LockScenarios(ContractBase):
    """One holder at a time, expiry by the store's clock, fences that only grow."""

    # ------------------------------------------------------------------ locks

    def test_acquire_grants_a_token_and_a_second_acquire_names_the_holder(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        holder = sample_holder("run-first", run_url="https://ci.example/runs/1")
        first = store.acquire_lock(key, holder, self.live_ttl_ms)
        assert isinstance(first, LockAcquired)
        assert first.token
        second = store.acquire_lock(key, sample_holder("run-second"), self.live_ttl_ms)
        assert second == LockHeld(holder=holder)

    def test_a_holder_without_a_run_url_round_trips(self, store: StateStore) -> None:
        key = fresh("lock")
        self._acquired(store, key, self.live_ttl_ms, who="run-first")
        held = store.acquire_lock(key, sample_holder("run-second"), self.live_ttl_ms)
        assert held == LockHeld(holder=sample_holder("run-first"))
        assert held.holder.run_url is None

    def test_renew_with_the_right_token_is_true_and_with_a_wrong_token_false(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.live_ttl_ms)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True
        assert store.renew_lock(key, "not-the-token", self.live_ttl_ms) is False
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True

    def test_a_renewal_extends_the_claim(self, store: StateStore) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.lock_ttl_ms)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True
        self.lapse(store, self.lock_ttl_ms)
        assert isinstance(store.acquire_lock(key, sample_holder("b"), self.live_ttl_ms), LockHeld)

    def test_release_then_acquire_works(self, store: StateStore) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.live_ttl_ms)
        store.release_lock(key, acquired.token)
        again = self._acquired(store, key, self.live_ttl_ms, who="b")
        assert again.token != acquired.token
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is False

    def test_release_with_a_wrong_token_leaves_the_lock_held(self, store: StateStore) -> None:
        key = fresh("lock")
        acquired = self._acquired(store, key, self.live_ttl_ms)
        store.release_lock(key, "not-the-token")
        assert isinstance(store.acquire_lock(key, sample_holder("b"), self.live_ttl_ms), LockHeld)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True

    def test_an_expired_lock_is_taken_over_and_the_evicted_token_cannot_renew(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        evicted = self._acquired(store, key, self.lock_ttl_ms)
        self.lapse(store, self.lock_ttl_ms)
        taker = store.acquire_lock(key, sample_holder("taker"), self.live_ttl_ms)
        assert isinstance(taker, LockAcquired)
        assert taker.token != evicted.token
        assert store.renew_lock(key, evicted.token, self.live_ttl_ms) is False
        store.release_lock(key, evicted.token)  # a no-op: it is not the holder any more
        assert store.acquire_lock(key, sample_holder("c"), self.live_ttl_ms) == LockHeld(
            holder=sample_holder("taker")
        )

    def test_an_expired_claim_is_renewable_until_someone_acquires_it(
        self, store: StateStore
    ) -> None:
        if not self.renews_expired_claims:
            pytest.skip("this store does not renew expired claims")
        key = fresh("lock")
        acquired = self._acquired(store, key, self.lock_ttl_ms)
        self.lapse(store, self.lock_ttl_ms)
        assert store.renew_lock(key, acquired.token, self.live_ttl_ms) is True
        assert isinstance(store.acquire_lock(key, sample_holder("b"), self.live_ttl_ms), LockHeld)

    def test_concurrent_acquire_of_a_free_key_has_exactly_one_winner(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")

        def acquire(i: int) -> LockAcquired | LockHeld:
            racer = self.concurrent_store(store, i)
            return racer.acquire_lock(key, sample_holder(f"racer-{i}"), self.live_ttl_ms)

        results = race(self.racers, acquire)
        winners = [i for i, r in enumerate(results) if isinstance(r, LockAcquired)]
        assert len(winners) == 1, results
        for r in results:
            if isinstance(r, LockHeld):
                assert r.holder.run_id == f"racer-{winners[0]}"

    def test_fence_strictly_increases_across_acquire_release_acquire(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        fences = []
        for _ in range(3):
            acquired = self._acquired(store, key, self.live_ttl_ms)
            fences.append(acquired.fence)
            store.release_lock(key, acquired.token)
        assert fences[0] < fences[1] < fences[2], fences

    def test_fence_strictly_increases_across_an_expiry_takeover(self, store: StateStore) -> None:
        key = fresh("lock")
        first = self._acquired(store, key, self.lock_ttl_ms)
        self.lapse(store, self.lock_ttl_ms)
        second = self._acquired(store, key, self.live_ttl_ms, who="b")
        assert second.fence > first.fence

    def test_fence_strictly_increases_across_deleting_the_holders_run(
        self, store: StateStore
    ) -> None:
        record = sample_record(fresh())
        lease = RUN_LEASE_PREFIX + record.id
        fences = []
        for _ in range(2):
            self._created(store, record)
            released = self._acquired(store, lease, self.live_ttl_ms, who=record.id)
            store.release_lock(lease, released.token)
            expired = self._acquired(store, lease, self.lock_ttl_ms, who=record.id)
            self.lapse(store, self.lock_ttl_ms)
            store.delete_run(record.id)  # what `runs prune` does
            fences += [released.fence, expired.fence]
        after = self._acquired(store, lease, self.live_ttl_ms, who="next")
        fences.append(after.fence)
        assert fences == sorted(set(fences)), fences

    def test_list_locks_lists_live_and_expired_claims_but_not_released_ones(
        self, store: StateStore
    ) -> None:
        run_id = fresh("run")
        live, expired, released = (fresh(f"lock-{name}") for name in ("a", "b", "c"))
        held = self._acquired(store, live, self.live_ttl_ms, who=run_id)
        lapsed = self._acquired(store, expired, self.lock_ttl_ms, who=run_id)
        gone = self._acquired(store, released, self.live_ttl_ms, who=run_id)
        store.release_lock(released, gone.token)
        self.lapse(store, self.lock_ttl_ms)
        listed = store.list_locks()
        assert [e.key for e in listed] == sorted(e.key for e in listed)
        mine = {e.key: e for e in listed if e.key in (live, expired, released)}
        assert sorted(mine) == sorted([live, expired])
        assert mine[live].holder == sample_holder(run_id)
        assert mine[live].fence == held.fence
        assert mine[expired].fence == lapsed.fence
        assert mine[live].expires_at > mine[expired].expires_at

    def test_list_locks_filters_by_the_holders_run(self, store: StateStore) -> None:
        mine, theirs = fresh("run"), fresh("run")
        keys = [fresh("lock") for _ in range(3)]
        for key, who in zip(keys, (mine, theirs, mine), strict=True):
            self._acquired(store, key, self.live_ttl_ms, who=who)
        listed = store.list_locks(run_id=mine)
        assert listed == [
            LockEntry(key=e.key, holder=sample_holder(mine), expires_at=e.expires_at, fence=e.fence)
            for e in listed
        ]
        assert [e.key for e in listed] == sorted([keys[0], keys[2]])
        assert store.list_locks(run_id=fresh("run")) == []

    # ------------------------------------------------------------------ break

    def _breaker(self, store: StateStore) -> StateStore:
        if not callable(getattr(store, "break_lock", None)):
            pytest.skip("this store has no break_lock")
        return store

    def test_break_removes_a_live_claim_and_returns_its_holder(self, store: StateStore) -> None:
        store = self._breaker(store)
        key = fresh("lock")
        broken = self._acquired(store, key, self.live_ttl_ms, who="run-stuck")
        assert store.break_lock(key) == sample_holder("run-stuck")
        assert all(e.key != key for e in store.list_locks())
        assert store.renew_lock(key, broken.token, self.live_ttl_ms) is False
        after = self._acquired(store, key, self.live_ttl_ms, who="b")
        assert after.fence > broken.fence
        store.release_lock(key, broken.token)  # the broken token releases nothing
        assert store.acquire_lock(key, sample_holder("c"), self.live_ttl_ms) == LockHeld(
            holder=sample_holder("b")
        )

    def test_break_of_an_expired_claim_returns_its_holder(self, store: StateStore) -> None:
        store = self._breaker(store)
        key = fresh("lock")
        lapsed = self._acquired(store, key, self.lock_ttl_ms, who="run-gone")
        self.lapse(store, self.lock_ttl_ms)
        assert store.break_lock(key) == sample_holder("run-gone")
        assert store.renew_lock(key, lapsed.token, self.live_ttl_ms) is False
        assert self._acquired(store, key, self.live_ttl_ms).fence > lapsed.fence

    def test_breaking_a_free_or_released_key_returns_none(self, store: StateStore) -> None:
        store = self._breaker(store)
        assert store.break_lock(fresh("lock")) is None
        key = fresh("lock")
        released = self._acquired(store, key, self.live_ttl_ms)
        store.release_lock(key, released.token)
        assert store.break_lock(key) is None
        assert self._acquired(store, key, self.live_ttl_ms).fence > released.fence

    def test_ttls_from_one_ms_to_366_days_are_accepted_and_longer_ones_refused(
        self, store: StateStore
    ) -> None:
        key = fresh("lock")
        first = self._acquired(store, key, 1)
        assert store.renew_lock(key, first.token, MAX_TTL_MS) is True
        with pytest.raises(ValueError, match="ttl"):
            store.renew_lock(key, first.token, MAX_TTL_MS + 1)
        with pytest.raises(ValueError, match="ttl"):
            store.acquire_lock(fresh("lock"), sample_holder(), MAX_TTL_MS + 1)
        self._acquired(store, fresh("lock"), MAX_TTL_MS)

    def test_renew_and_release_of_an_absent_lock_are_safe(self, store: StateStore) -> None:
        key = fresh("lock")
        assert store.renew_lock(key, "no-such-token", self.live_ttl_ms) is False
        store.release_lock(key, "no-such-token")
        self._acquired(store, key, self.live_ttl_ms)

    @pytest.mark.parametrize("ttl", [0, -5])
    def test_a_non_positive_ttl_is_rejected(self, store: StateStore, ttl: int) -> None:
        key = fresh("lock")
        with pytest.raises(ValueError, match="ttl"):
            store.acquire_lock(key, sample_holder(), ttl)
        acquired = self._acquired(store, key, self.live_ttl_ms)
        with pytest.raises(ValueError, match="ttl"):
            store.renew_lock(key, acquired.token, ttl)

    # ------------------------------------------------------------------ safety

    @pytest.mark.parametrize("bad", UNSAFE_IDS)
    def test_unsafe_lock_keys_are_rejected_by_every_method(
        self, store: StateStore, bad: str
    ) -> None:
        calls: list[Callable[[], object]] = [
            lambda: store.acquire_lock(bad, sample_holder(), self.live_ttl_ms),
            lambda: store.renew_lock(bad, "token", self.live_ttl_ms),
            lambda: store.release_lock(bad, "token"),
        ]
        if callable(getattr(store, "break_lock", None)):
            calls.append(lambda: store.break_lock(bad))
        for call in calls:
            with pytest.raises(UnsafeIdError):
                call()
