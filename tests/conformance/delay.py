"""The conformance suite of lock-delay (``docs/contributing/design-remembering.md``): after a lease
ends without its holder's release (it runs out, or is force-released), nothing is granted before
that end plus the holder's delay (by the taker's clock, less the skew window, on a store timed by
its callers' clocks). A release has no delay, and a lease without one is as before. A store
passes by subclassing ``DelayConformance`` beside its ``StoreConformance``."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from awsflock.clock import FakeClock
from awsflock.protocol import Attempt, LockStore, Outcome
from awsflock.records import Identity
from tests.conformance.suite import SKEW, Lab, new_id

DELAY = 30_000


class DelayLab(Lab):
    def take_with_delay(
        self, name: str, *, at: int = 0, lease: int = 1000, delay: int = DELAY, owner: str = "a"
    ) -> tuple[str, Outcome]:
        lease_id = new_id()
        who = Identity(owner=owner, host=f"{owner}-host", pid=42, user="u", command="cmd")
        attempt = Attempt(lease_id, who, self.now + at, lease, SKEW)
        return lease_id, self.store.take(name, dataclasses.replace(attempt, delay_ms=delay))

    def force(self, name: str, lease_id: str, force_id: str, *, at: int = 0, **kw: Any) -> Outcome:
        """A force that lands at once. A store that reads its own clock once a force's answer
        is in (DynamoDB, to count a lock-delay from no earlier than the landing) reads the
        force's time here."""
        clock = getattr(self.store, "clock", None)
        if clock is None:
            return super().force(name, lease_id, force_id, at=at, **kw)
        self.store.clock = FakeClock((self.now + at) / 1000)
        try:
            return super().force(name, lease_id, force_id, at=at, **kw)
        finally:
            self.store.clock = clock


class DelayConformance:
    """Every test here must pass on every store."""

    @pytest.fixture
    def dl(self, store: LockStore) -> DelayLab:
        return DelayLab(store)

    def test_a_lease_that_ran_out_is_kept_for_its_delay_after_its_end(self, dl):
        name = dl.name()
        _, taken = dl.take_with_delay(name)
        assert dl.held(taken).lock_delay == DELAY / 1000
        ran_out = dl.held(taken).expires_at
        assert not dl.take(name, at=1000 + SKEW + 1)[1].applied  # reclaimable, but delayed
        assert not dl.take(name, at=1000 + DELAY + SKEW - 1)[1].applied
        refused = dl.take(name, at=1000 + DELAY + SKEW - 1)[1]
        assert dl.held(refused).free_after() == ran_out + DELAY / 1000
        assert dl.take(name, at=1000 + DELAY + SKEW + 1)[1].applied

    def test_a_forced_lease_is_kept_for_its_delay_after_the_force(self, dl):
        name = dl.name()
        first, _ = dl.take_with_delay(name, lease=60_000)
        assert dl.force(name, first, "f1", at=100).applied
        assert not dl.take(name, at=101)[1].applied
        assert not dl.take(name, at=100 + DELAY + SKEW - 1)[1].applied
        assert dl.take(name, at=100 + DELAY + SKEW + 1)[1].applied

    def test_a_release_has_no_delay(self, dl):
        name = dl.name()
        first, _ = dl.take_with_delay(name, lease=60_000)
        assert dl.release(name, first, at=100).applied
        assert dl.take(name, at=101)[1].applied

    def test_without_a_delay_a_forced_lease_is_free_at_once_as_before(self, dl):
        name = dl.name()
        first, _ = dl.take_with_delay(name, lease=60_000, delay=0)
        assert dl.force(name, first, "f1", at=100).applied
        assert dl.take(name, at=101)[1].applied

    def test_a_renewal_moves_the_delay_with_the_end(self, dl):
        name = dl.name()
        first, _ = dl.take_with_delay(name)
        assert dl.renew(name, first, at=500, lease=2000).applied  # now ends at 2500
        assert not dl.take(name, at=2500 + DELAY + SKEW - 1)[1].applied
        assert dl.take(name, at=2500 + DELAY + SKEW + 1)[1].applied

    def test_each_holder_has_its_own_delay(self, dl):
        name = dl.name()
        first, _ = dl.take_with_delay(name, lease=60_000)
        assert dl.release(name, first, at=10).applied
        _, second = dl.take_with_delay(name, at=20, delay=0)  # this holder asks for none
        assert second.applied and dl.held(second).lock_delay == 0
        assert dl.force(name, dl.held(second).lease_id, "f1", at=30).applied
        assert dl.take(name, at=31)[1].applied

    def test_a_resize_that_makes_a_pool_waits_for_the_plain_lease_s_delay(self, dl):
        name = dl.name()
        dl.take_with_delay(name)  # runs out at 1000
        inside = dl.now + 1000 + SKEW + 1
        assert not dl.store.resize_pool(name, None, 2, now_ms=inside, skew_ms=SKEW)
        after = dl.now + 1000 + DELAY + SKEW + 1
        assert dl.store.resize_pool(name, None, 2, now_ms=after, skew_ms=SKEW)
