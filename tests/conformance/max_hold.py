"""The conformance suite of max-hold (``docs/contributing/design-remembering.md``): a take with
``max_hold_ms`` records its cap (the take's time plus it), and no take or renewal sets the
lease's end past it; a renewer that does not know the cap is given the cap, not refused; at
the cap no renewal applies. A store passes by subclassing ``MaxHoldConformance`` beside its
``StoreConformance``."""

from __future__ import annotations

import dataclasses

import pytest

from awsflock.protocol import Attempt, LockStore, Outcome
from awsflock.records import Identity
from tests.conformance.suite import SKEW, Lab, new_id

HOLD = 10_000


class HoldLab(Lab):
    def take_capped(
        self,
        name: str,
        *,
        at: int = 0,
        lease: int = 4000,
        hold: int = HOLD,
        slot: int | None = None,
        slots: int | None = None,
    ) -> tuple[str, Outcome]:
        lease_id = new_id() if slot is None else f"{new_id()}.{slot}"
        who = Identity(owner="a", host="a-host", pid=42, user="u", command="cmd")
        attempt = Attempt(lease_id, who, self.now + at, lease, SKEW, slot, slots)
        return lease_id, self.store.take(name, dataclasses.replace(attempt, max_hold_ms=hold))

    def ends(self, outcome: Outcome, slot: int | None = None) -> tuple[float, float | None]:
        """The lease's end and its cap, relative to the lab's start (seconds)."""
        pool = outcome.pool
        record = self.held(outcome) if slot is None or pool is None else pool.slots[slot]
        cap = None if record.capped_at is None else record.capped_at - self.now / 1000
        return round(record.expires_at - self.now / 1000, 3), cap


class MaxHoldConformance:
    """Every test here must pass on every store."""

    @pytest.fixture
    def hl(self, store: LockStore) -> HoldLab:
        return HoldLab(store)

    def test_a_take_records_its_cap_and_a_lease_longer_than_it_ends_there(self, hl):
        name = hl.name()
        _, taken = hl.take_capped(name, lease=4000)
        assert taken.applied and hl.ends(hl.store.read(name)) == (4.0, 10.0)
        other = hl.name("other")
        _, long = hl.take_capped(other, lease=60_000)
        assert long.applied and hl.ends(hl.store.read(other)) == (10.0, 10.0)

    def test_a_renewal_moves_the_end_up_to_the_cap_and_no_further(self, hl):
        name = hl.name()
        lease_id, _ = hl.take_capped(name)
        assert hl.renew(name, lease_id, at=3000, lease=4000).applied
        assert hl.ends(hl.store.read(name)) == (7.0, 10.0)
        renewed = hl.renew(name, lease_id, at=6500, lease=4000)  # would end at 10.5
        assert renewed.applied and hl.ends(hl.store.read(name)) == (10.0, 10.0)
        assert hl.renew(name, lease_id, at=8000, lease=30_000).applied  # given the cap
        assert hl.ends(hl.store.read(name)) == (10.0, 10.0)
        assert not hl.renew(name, lease_id, at=10_001, lease=4000).applied

    def test_a_take_without_a_max_hold_leaves_no_cap_behind(self, hl):
        name = hl.name()
        first, _ = hl.take_capped(name)
        assert hl.release(name, first, at=100).applied
        _, second = hl.take(name, at=200, lease=60_000)
        assert second.applied
        record = hl.store.read(name).lock
        assert record is not None and record.capped_at is None
        assert record.expires_at == pytest.approx((hl.now + 60_200) / 1000)

    def test_a_pool_slot_takes_its_own_cap(self, hl):
        name = hl.name()
        lease_id, _ = hl.take_capped(name, slot=1, slots=2, lease=60_000)
        outcome = hl.store.read(name)
        assert outcome.pool is not None
        assert hl.ends(outcome, slot=1) == (10.0, 10.0)
        assert not hl.renew(name, lease_id, at=10_001, slot=1).applied
