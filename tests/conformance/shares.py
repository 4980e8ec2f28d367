"""The conformance suite of shared holders (``awsflock.shares``): what every store whose kind holds
shares must do. A store passes by subclassing ``ShareConformance`` beside its
``StoreConformance`` (the same ``store`` fixture)."""

from __future__ import annotations

from typing import Any

import pytest

from awsflock import shares
from awsflock.protocol import Attempt, LockStore, Outcome, audit_key
from awsflock.records import Identity, LockRecord
from awsflock.stores import kinds
from tests.conformance.suite import MINUTE, SKEW, Lab, _keeps_done, _token


class ShareLab(Lab):
    """A ``Lab`` that also takes shares and claims."""

    def share(self, name: str, *, at: int = 0, lease: int = MINUTE, owner: str = "r") -> Any:
        return self.take(name, shares.new_share_id(), at=at, lease=lease, owner=owner)

    def long_share(self, name: str, *, at: int = 0) -> Any:
        """A share whose holder's every field is long (a store may cut them)."""
        text = "x" * 2000
        who = Identity(owner=text, host=text, pid=4_194_304, user=text, ci_url=text, command=text)
        lease_id = shares.new_share_id()
        attempt = Attempt(lease_id, who, self.now + at, MINUTE, SKEW)
        return lease_id, self.store.take(name, attempt)

    def share_seen(self, name: str, seen: LockRecord | None, *, at: int = 0) -> Any:
        """A share's take sent as a waiter sends it: with the record its last answer showed."""
        who = Identity(owner="late", host="late-host", pid=9, user="u", command="cmd")
        lease_id = shares.new_share_id()
        attempt = Attempt(lease_id, who, self.now + at, MINUTE, SKEW, seen=seen)
        return lease_id, self.store.take(name, attempt)

    def claim(self, name: str, *, at: int = 0, until: int = shares.CLAIM_MS) -> Outcome:
        steps: Any = self.store
        return steps.claim(name, now_ms=self.now + at, until_ms=self.now + at + until)

    def record(self, name: str) -> LockRecord:
        record = self.store.read(name).lock
        assert record is not None
        return record

    def share_of(self, name: str, lease_id: str) -> LockRecord | None:
        return next((s for s in self.record(name).shares if s.lease_id == lease_id), None)


class ShareConformance:
    """Every test here must pass on every store whose kind holds shares."""

    @pytest.fixture
    def shl(self, store: LockStore) -> ShareLab:
        if not kinds.of(store).shares:
            pytest.skip("this store's kind holds no shares")
        return ShareLab(store)

    def test_shares_of_a_free_lock_are_held_together_each_with_its_own_token(self, shl):
        name = shl.name()
        first, one = shl.share(name, owner="r1")
        second, two = shl.share(name, at=10, lease=2 * MINUTE, owner="r2")
        assert one.applied and two.applied
        record = shl.record(name)
        assert record.shared and not record.released
        assert shares.is_group_id(record.lease_id) and record.lease_id == shares.group_of(first)
        held = {s.lease_id: s for s in record.shares}
        assert set(held) == {first, second}
        assert held[first].owner == "r1" and held[second].owner == "r2"
        assert _token(held[second]) > _token(held[first])
        assert _token(record) == _token(held[second])  # the latest given
        # The group ends with its latest share, so everything that waits for a lease waits
        # for every share.
        assert record.expires_at * 1000 == shl.now + 10 + 2 * MINUTE

    def test_an_exclusive_take_waits_for_every_share_and_goes_above_their_tokens(self, shl):
        name = shl.name()
        first, _ = shl.share(name)
        second, _ = shl.share(name, at=5)
        _, refused = shl.take(name, at=10)
        assert not refused.applied and refused.lock is not None and refused.lock.shared
        assert shl.release(name, first, at=20).applied
        _, still = shl.take(name, at=21)
        assert not still.applied  # one share is left
        tokens = [_token(s) for s in shl.record(name).shares]
        assert shl.release(name, second, at=30).applied
        record = shl.record(name)
        assert record.released and not record.shares
        _, taken = shl.take(name, at=31)  # at once: the last share released ended the group
        assert taken.applied
        assert _token(shl.held(taken)) > max(tokens)
        assert not shl.record(name).shared and not shl.record(name).shares

    def test_a_share_waits_for_an_exclusive_holder_and_goes_above_its_token(self, shl):
        name = shl.name()
        writer, taken = shl.take(name)
        _, refused = shl.share(name, at=5)
        assert not refused.applied and refused.lock.lease_id == writer
        assert shl.release(name, writer, at=10).applied
        share, granted = shl.share(name, at=11)
        assert granted.applied
        assert _token(shl.share_of(name, share)) > _token(shl.held(taken))
        assert shl.record(name).history[0][0] == writer

    def test_a_release_brings_the_group_end_down_to_the_shares_left(self, shl):
        # Found by review 4: the group's end stayed the latest ever given, so a waiting
        # exclusive acquire waited for a share already released.
        name = shl.name()
        long, _ = shl.share(name, lease=10 * MINUTE)
        shl.share(name, at=1, lease=10_000)  # dies at 10 s
        assert shl.release(name, long, at=2).applied
        assert shl.record(name).expires_at * 1000 == shl.now + 1 + 10_000
        _, early = shl.take(name, at=10_000 + SKEW)
        assert not early.applied
        _, taken = shl.take(name, at=10_000 + SKEW + 10)
        assert taken.applied

    def test_a_share_that_dies_holds_the_group_until_its_own_end(self, shl):
        name = shl.name()
        shl.share(name, lease=MINUTE)  # dies without a release
        other, _ = shl.share(name, at=1, lease=10_000)
        assert shl.release(name, other, at=2).applied
        assert not shl.record(name).released  # the first share is live
        _, early = shl.take(name, at=MINUTE + SKEW - 10)
        assert not early.applied
        _, late = shl.take(name, at=MINUTE + SKEW + 10)
        assert late.applied

    def test_the_last_live_share_released_ends_a_group_of_shares_that_ran_out(self, shl):
        name = shl.name()
        shl.share(name, lease=10_000)  # dies, and runs out at 10 s
        other, _ = shl.share(name, at=1)
        assert shl.release(name, other, at=10_000 + SKEW + 100).applied
        assert shl.record(name).released
        _, taken = shl.take(name, at=10_000 + SKEW + 200)
        assert taken.applied

    def test_a_share_is_renewed_on_its_own_and_raises_the_group_end(self, shl):
        name = shl.name()
        first, _ = shl.share(name, lease=10_000)
        second, _ = shl.share(name, at=1, lease=10_000)
        renewed = shl.renew(name, first, at=5_000, lease=MINUTE)
        assert renewed.applied
        assert shl.share_of(name, first).expires_at * 1000 == shl.now + 5_000 + MINUTE
        assert shl.share_of(name, second).expires_at * 1000 == shl.now + 1 + 10_000
        assert shl.record(name).expires_at * 1000 == shl.now + 5_000 + MINUTE
        # A share that ran out is never revived, though its group lives.
        assert not shl.renew(name, second, at=11_000).applied

    def test_a_plain_renew_or_release_never_applies_to_a_group(self, shl):
        name = shl.name()
        shl.share(name)
        group = shl.record(name).lease_id
        assert not shl.renew(name, group, at=1).applied
        assert not shl.release(name, group, at=2).applied
        assert not shl.record(name).released

    def test_a_released_share_is_never_granted_again_and_its_retry_learns_it(self, shl):
        name = shl.name()
        keep, _ = shl.share(name)
        gone, _ = shl.share(name, at=1)
        assert shl.release(name, gone, at=2).applied
        again = shl.release(name, gone, at=3)
        assert not again.applied
        if _keeps_done(shl.store):
            assert shl.store.read(name, gone).knows(gone)
            _, late = shl.take(name, gone, at=4)
            assert not late.applied
        assert shl.share_of(name, keep) is not None

    def test_a_claim_keeps_new_shares_out_until_it_lapses(self, shl):
        name = shl.name()
        reader, _ = shl.share(name)
        assert not shl.claim(shl.name("other")).applied  # nothing to claim
        claimed = shl.claim(name, at=10)
        assert claimed.applied and claimed.lock.claimed_until is not None
        _, kept_out = shl.share(name, at=20)
        assert not kept_out.applied
        assert shl.share_of(name, reader) is not None  # held shares stay
        assert shl.renew(name, reader, at=30).applied
        _, after = shl.share(name, at=10 + shares.CLAIM_MS + 1)
        assert after.applied

    def test_an_exclusive_grant_clears_the_claim(self, shl):
        name = shl.name()
        reader, _ = shl.share(name)
        assert shl.claim(name, at=1, until=MINUTE).applied
        assert shl.release(name, reader, at=2).applied
        writer, _ = shl.take(name, at=3)
        assert shl.release(name, writer, at=4).applied
        _, share = shl.share(name, at=5)
        assert share.applied

    def test_force_release_ends_one_share_or_the_whole_group(self, shl):
        name = shl.name()
        one, _ = shl.share(name)
        two, _ = shl.share(name, at=1)
        three, _ = shl.share(name, at=2)
        audit = {"target": name, "lease": one, "status": "applied", "actor": "ops"}
        assert shl.force(name, one, "f1", at=10, audit=audit).applied
        assert shl.share_of(name, one) is None and shl.share_of(name, two) is not None
        assert any(e.get("lease") == one for e in shl.store.audit_entries())
        assert audit_key(one).endswith(one)
        group = shl.record(name).lease_id
        assert shl.force(name, group, "f2", at=20).applied
        record = shl.record(name)
        assert record.released and record.forced and record.forced_by == "ops"
        assert not shl.renew(name, two, at=30).applied
        assert not shl.release(name, three, at=31).applied
        _, taken = shl.take(name, at=32)
        assert taken.applied

    def test_at_most_max_shares_at_once(self, shl):
        name = shl.name()
        ids = []
        for n in range(shares.MAX_SHARES):  # each holder as long as it can be
            lease_id, outcome = shl.long_share(name, at=n)
            assert outcome.applied, n
            ids.append(lease_id)
        assert len(shl.record(name).shares) == shares.MAX_SHARES
        _, full = shl.share(name, at=shares.MAX_SHARES)
        assert not full.applied
        assert shl.release(name, ids[0], at=shares.MAX_SHARES + 1).applied
        _, room = shl.share(name, at=shares.MAX_SHARES + 2)
        assert room.applied

    def test_shares_and_pools_do_not_mix(self, shl):
        name, pool = shl.name(), shl.name("pool")
        shl.share(name)
        _, slot = shl.take(name, at=1, slot=0, slots=2)
        assert not slot.applied
        shl.take(pool, slot=0, slots=2)
        _, share = shl.share(pool, at=1)
        assert not share.applied

    def test_a_join_sent_for_a_group_that_ended_is_counted_in_the_group_it_lands_in(self, shl):
        # Found by review 4 on DynamoDB: a waiter's join, made from its last answer, landed in
        # the group that replaced the one it saw, uncounted (a phantom share, a false "not
        # held" for the others, and a group that could end only by running out).
        name = shl.name()
        first, _ = shl.share(name)
        seen = shl.record(name)
        assert shl.release(name, first, at=1).applied
        second, _ = shl.share(name, at=2)
        late, joined = shl.share_seen(name, seen, at=3)
        if joined.applied:
            assert {s.lease_id for s in shl.record(name).shares} == {second, late}
            assert shl.release(name, second, at=4).applied
            assert not shl.record(name).released
            assert shl.release(name, late, at=5).applied
            assert shl.record(name).released  # the last share's release ends the group
        else:
            assert second in {s.lease_id for s in shl.record(name).shares}

    def test_shares_that_ran_out_leave_room_and_never_hold_up_the_last_release(self, shl):
        # Found by review 4 on DynamoDB: shares that ran out were counted against the limit,
        # and more than 20 of them kept the last live share's release from ending the group.
        name = shl.name()
        for n in range(shares.MAX_SHARES - 1):
            shl.share(name, at=n, lease=10_000)  # die without a release
        live, _ = shl.share(name, at=shares.MAX_SHARES, lease=10 * MINUTE)
        later = 10_000 + shares.MAX_SHARES + SKEW + 1
        joiner, joined = shl.share_seen(name, shl.record(name), at=later)
        assert joined.applied, "refused though every share but one ran out"
        assert shl.release(name, joiner, at=later + 1).applied
        assert shl.release(name, live, at=later + 2).applied
        assert shl.record(name).released
        _, taken = shl.take(name, at=later + 3)
        assert taken.applied

    def test_a_new_group_over_the_most_shares_that_ran_out(self, shl):
        # Found by review 4 on DynamoDB Local: a new group's take over a group of 100 shares
        # that ran out named them all, past DynamoDB's 4 KB expression limit.
        name = shl.name()
        for n in range(shares.MAX_SHARES):
            shl.share(name, at=n, lease=10_000)
        later = 10_000 + shares.MAX_SHARES + SKEW + 1
        share, taken = shl.share_seen(name, shl.record(name), at=later)
        assert taken.applied
        assert [s.lease_id for s in shl.record(name).shares] == [share]
