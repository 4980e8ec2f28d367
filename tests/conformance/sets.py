"""The conformance suite of sets (``awsflock.sets.SetSteps``): what every store whose kind holds
sets must do. A store passes by subclassing ``SetConformance`` beside its ``StoreConformance``
(the same ``store`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from awsflock import errors, sets
from awsflock.protocol import Attempt, LockStore, Outcome
from awsflock.records import Identity, LockRecord
from awsflock.stores import kinds
from tests.conformance.suite import MINUTE, SKEW, Lab, _keeps_done, new_id, ticket


class SetLab(Lab):
    """A ``Lab`` that also takes, renews and releases sets."""

    @property
    def steps(self) -> sets.SetSteps:
        """The store's set steps (a store whose kind holds sets has them)."""
        steps: Any = self.store
        return steps

    def take_all(
        self, names: list[str], set_id: str | None = None, *, at: int = 0, owner: str = "s"
    ) -> tuple[str, tuple[Outcome, ...]]:
        set_id = set_id or sets.new_set_id()
        who = Identity(owner=owner, host=f"{owner}-host", pid=43, user="u", command="set")
        takes = [
            (name, Attempt(sets.member_id(set_id, name), who, self.now + at, MINUTE, SKEW))
            for name in names
        ]
        return set_id, self.steps.take_all(takes)

    def renew_all(
        self, names: list[str], set_id: str, *, at: int = 0, lease: int = MINUTE
    ) -> tuple[Outcome, ...]:
        leases = [(name, sets.member_id(set_id, name)) for name in names]
        return self.steps.renew_all(leases, now_ms=self.now + at, lease_ms=lease, skew_ms=SKEW)

    def release_all(self, names: list[str], set_id: str, *, at: int = 0) -> tuple[Outcome, ...]:
        leases = [(name, sets.member_id(set_id, name)) for name in names]
        return self.steps.release_all(leases, now_ms=self.now + at, skew_ms=SKEW)

    def holder(self, name: str) -> LockRecord | None:
        record = self.store.read(name).lock
        if record is None or record.released or record.lease_id is None:
            return None
        return record


class SetConformance:
    """Every test here must pass on every store whose kind holds sets."""

    @pytest.fixture
    def slab(self, store: LockStore) -> SetLab:
        lab = SetLab(store)
        lab.take(lab.name("probe"))  # the DynamoDB store learns whether it has transactions
        if not kinds.sets(store):
            pytest.skip("without transactions (dynalite) no set is taken: see the test below")
        return lab

    def test_without_transactions_a_set_is_refused_before_anything_is_written(self, store):
        lab = SetLab(store)
        lab.take(lab.name("probe"))
        if kinds.sets(store):
            pytest.skip("this store takes sets")
        a, b = lab.name("a"), lab.name("b")
        with pytest.raises(errors.ConfigurationError, match="several locks in one step"):
            lab.take_all([a, b])
        assert lab.store.read(a).lock is None and lab.store.read(b).lock is None

    def test_a_set_of_free_names_is_granted_whole_each_name_with_its_own_token(self, slab):
        names = [slab.name("a"), slab.name("b"), slab.name("c")]
        earlier, taken = slab.take(names[1])
        assert slab.release(names[1], earlier, at=1).applied
        set_id, outcomes = slab.take_all(names, at=10)
        assert [o.applied for o in outcomes] == [True, True, True]
        for name, outcome in zip(names, outcomes):
            record = slab.holder(name)
            assert record is not None and record.lease_id == sets.member_id(set_id, name)
            assert record.owner == "s" and record.fencing_token is not None
            assert outcome.lock is None or outcome.lock.lease_id == record.lease_id
        b_token = slab.holder(names[1]).fencing_token
        assert b_token > slab.held(taken).fencing_token

    def test_a_set_with_one_held_name_is_refused_and_writes_nothing(self, slab):
        names = [slab.name("a"), slab.name("b"), slab.name("c")]
        holder, _ = slab.take(names[2], owner="h")
        _, outcomes = slab.take_all(names, at=10)
        assert [o.applied for o in outcomes] == [False, False, False]
        assert outcomes[2].lock is not None and outcomes[2].lock.lease_id == holder
        assert slab.holder(names[0]) is None and slab.holder(names[1]) is None
        assert slab.store.read(names[0]).lock is None  # not even a record was made
        # Once the holder lets go, the same names are taken whole.
        assert slab.release(names[2], holder, at=20).applied
        _, again = slab.take_all(names, at=30)
        assert all(o.applied for o in again)

    def test_two_sets_sharing_a_name_are_never_both_granted(self, slab):
        a, b, c = slab.name("a"), slab.name("b"), slab.name("c")
        first, one = slab.take_all([a, b])
        _, two = slab.take_all([c, b], at=5, owner="t")
        assert all(o.applied for o in one) and not any(o.applied for o in two)
        assert slab.holder(c) is None
        assert slab.holder(b).lease_id == sets.member_id(first, b)

    def test_a_set_reclaims_an_expired_name_only_after_the_skew_window(self, slab):
        a, b = slab.name("a"), slab.name("b")
        old, _ = slab.take(a, lease=1000)
        _, within = slab.take_all([a, b], at=1000 + SKEW - 1)
        assert not any(o.applied for o in within)
        if slab.store.skew_free:
            return  # the server's clock times the lease: the caller's times are not used
        set_id, after = slab.take_all([a, b], at=1000 + SKEW + 1)
        assert all(o.applied for o in after)
        record = slab.holder(a)
        assert record is not None and record.lease_id == sets.member_id(set_id, a)
        assert slab.store.read(a).lock.history[0] == (old, "")

    def test_a_set_s_take_that_lands_again_takes_nothing(self, slab):
        a, b = slab.name("a"), slab.name("b")
        set_id, first = slab.take_all([a, b])
        assert all(o.applied for o in first)
        _, retry = slab.take_all([a, b], set_id, at=5)
        assert not any(o.applied for o in retry)
        assert slab.release_all([a, b], set_id, at=10)[0].applied
        _, late = slab.take_all([a, b], set_id, at=20)
        assert not any(o.applied for o in late), "a set's ids were granted twice"

    def test_renew_all_extends_each_name_and_refuses_a_lost_one_alone(self, slab):
        a, b = slab.name("a"), slab.name("b")
        set_id, _ = slab.take_all([a, b])
        renewed = slab.renew_all([a, b], set_id, at=30_000, lease=120_000)
        assert [o.applied for o in renewed] == [True, True]
        for name in (a, b):
            expires = slab.holder(name).expires_at
            assert expires == pytest.approx((slab.now + 150_000) / 1000, abs=1)
        member_b = sets.member_id(set_id, b)
        assert slab.force(b, member_b, "f1", at=31_000).applied
        again = slab.renew_all([a, b], set_id, at=32_000, lease=120_000)
        assert [o.applied for o in again] == [True, False]
        refused = again[1].lock
        assert refused is not None and refused.lease_id == member_b and refused.released

    def test_release_all_ends_every_name_and_a_retry_learns_it_did(self, slab):
        a, b = slab.name("a"), slab.name("b")
        set_id, _ = slab.take_all([a, b])
        ended = slab.release_all([a, b], set_id, at=10)
        assert [o.applied for o in ended] == [True, True]
        assert slab.holder(a) is None and slab.holder(b) is None
        retry = slab.release_all([a, b], set_id, at=20)
        assert not any(o.applied for o in retry)
        for name, outcome in zip((a, b), retry):
            assert outcome.knows(sets.member_id(set_id, name))
        _, taken = slab.take(a, at=30)
        assert taken.applied

    def test_release_all_of_a_set_never_granted_bars_its_ids(self, slab):
        if not _keeps_done(slab.store) and not getattr(self, "bars", False):
            pytest.skip("this store keeps no leases apart from their records")
        a, b = slab.name("a"), slab.name("b")
        set_id = sets.new_set_id()
        released = slab.release_all([a, b], set_id, at=10)
        assert not any(o.applied for o in released)
        assert all(o.barred for o in released)
        _, late = slab.take_all([a, b], set_id, at=20)
        assert not any(o.applied for o in late), "a barred set was granted"

    def test_a_set_never_goes_ahead_of_a_fair_waiter(self, slab):
        a, b = slab.name("a"), slab.name("b")
        holder, _ = slab.take(b)
        assert slab.join(b, ticket(1), 0).applied
        assert slab.release(b, holder, at=10).applied
        _, outcomes = slab.take_all([a, b], at=20)
        assert not any(o.applied for o in outcomes)
        assert slab.holder(a) is None

    def test_a_set_naming_a_pool_is_refused(self, slab):
        a, pool = slab.name("a"), slab.name("pool")
        _, slot = slab.take(pool, new_id() + ".0", slot=0, slots=2)
        assert slot.applied
        _, outcomes = slab.take_all([a, pool], at=10)
        assert not any(o.applied for o in outcomes)
        assert slab.holder(a) is None

    def test_a_set_step_the_library_never_sends_is_refused_before_it_is_sent(self, slab):
        a = slab.name("a")
        who = Identity(owner="s")
        attempt = Attempt(new_id(), who, slab.now, MINUTE, SKEW)
        with pytest.raises(ValueError):
            slab.store.take_all([(a, attempt), (a, attempt)])
        with pytest.raises(ValueError):
            slot = Attempt(new_id(), who, slab.now, MINUTE, SKEW, slot=0, slots=2)
            slab.store.take_all([(a, slot)])
        assert slab.store.read(a).lock is None
