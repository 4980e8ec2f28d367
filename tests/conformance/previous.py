"""The conformance suite of ``previous`` (``docs/contributing/design-remembering.md``): every grant
says exactly how the lease before it ended, in its answer and in the record read afterwards. A
store passes by subclassing ``PreviousConformance`` beside its ``StoreConformance`` (the same
``store`` fixture)."""

from __future__ import annotations

import pytest

from awsflock.protocol import LockStore, Outcome
from awsflock.records import EXPIRED, FIRST, FORCED, RELEASED, Previous
from awsflock.stores import kinds
from tests.conformance.shares import ShareLab
from tests.conformance.suite import MINUTE, SKEW, Lab


def previous_of(lab: Lab, name: str, outcome: Outcome) -> Previous:
    """The grant's ``previous`` as its answer says it, which the record read after must agree
    with (what ``status`` shows)."""
    assert outcome.applied, outcome
    said = lab.held(outcome).previous
    assert said is not None, "the grant does not say how the lease before it ended"
    assert lab.held(lab.store.read(name)).previous == said
    return said


class PreviousConformance:
    """Every test here must pass on every store whose grants say how the lease before ended."""

    @pytest.fixture
    def lab(self, store: LockStore) -> Lab:
        return Lab(store)

    def test_the_first_grant_on_a_lock_follows_nothing(self, lab: Lab):
        name = lab.name()
        _, outcome = lab.take(name)
        assert previous_of(lab, name, outcome) == Previous(FIRST)

    def test_a_grant_after_a_release_says_released_and_is_not_unreleased(self, lab: Lab):
        name = lab.name()
        first, _ = lab.take(name, owner="a")
        assert lab.release(name, first, at=10).applied
        _, outcome = lab.take(name, at=20, owner="b")
        said = previous_of(lab, name, outcome)
        assert said == Previous(RELEASED) and not said.unreleased

    def test_a_reclaim_says_expired_naming_the_holder_and_when_it_ran_out(self, lab: Lab):
        name = lab.name()
        first, taken = lab.take(name, lease=1000, owner="a")
        ran_out = lab.held(taken).expires_at
        _, outcome = lab.take(name, at=1000 + SKEW + 1, owner="b")
        said = previous_of(lab, name, outcome)
        assert said.how == EXPIRED and said.unreleased
        assert (said.lease_id, said.owner, said.host) == (first, "a", "a-host")
        assert said.ended_at == ran_out

    def test_a_renewed_lease_that_ran_out_says_when_its_last_renewal_ended(self, lab: Lab):
        name = lab.name()
        first, _ = lab.take(name, lease=1000, owner="a")
        renewed = lab.renew(name, first, at=500, lease=2000)
        assert renewed.applied
        _, outcome = lab.take(name, at=2500 + SKEW + 1, owner="b")
        said = previous_of(lab, name, outcome)
        assert said.how == EXPIRED and said.ended_at == lab.held(renewed).expires_at

    def test_a_grant_after_a_force_release_names_the_operator_and_why(self, lab: Lab):
        name = lab.name()
        first, _ = lab.take(name, owner="a")
        assert lab.force(name, first, "f1", at=10).applied
        forced_at = lab.held(lab.store.read(name)).forced_at
        assert forced_at is not None
        _, outcome = lab.take(name, at=20, owner="b")
        said = previous_of(lab, name, outcome)
        assert said.how == FORCED and said.unreleased
        assert (said.lease_id, said.owner, said.forced_by, said.forced_reason) == (
            first,
            "a",
            "ops",
            "stuck",
        )
        assert said.ended_at == forced_at

    def test_each_grant_says_its_own_previous_not_an_older_one(self, lab: Lab):
        name = lab.name()
        first, _ = lab.take(name, lease=1000, owner="a")
        second, reclaim = lab.take(name, at=1000 + SKEW + 1, owner="b")
        assert previous_of(lab, name, reclaim).lease_id == first
        assert lab.release(name, second, at=1000 + SKEW + 2).applied
        _, outcome = lab.take(name, at=1000 + SKEW + 3, owner="c")
        assert previous_of(lab, name, outcome) == Previous(RELEASED)

    def test_a_pool_slot_says_its_own_previous(self, lab: Lab):
        name = lab.name()
        first, _ = lab.take(name, slot=0, slots=2, owner="a")
        _, other = lab.take(name, slot=1, slots=2, owner="b")
        assert lab.held(other).previous == Previous(FIRST)
        assert lab.release(name, first, at=10, slot=0).applied
        _, again = lab.take(name, at=20, slot=0, slots=2, owner="c")
        assert lab.held(again).previous == Previous(RELEASED)

    def test_a_refused_take_changes_nothing_the_next_grant_says(self, lab: Lab):
        name = lab.name()
        first, _ = lab.take(name, lease=MINUTE, owner="a")
        _, refused = lab.take(name, at=10, owner="b")
        assert not refused.applied
        assert lab.release(name, first, at=20).applied
        _, outcome = lab.take(name, at=30, owner="c")
        assert previous_of(lab, name, outcome) == Previous(RELEASED)

    # -- shared holders: a share says its group's previous; a group ends released only if
    # every share was released by its holder, else the grant after it names one that was not.

    @pytest.fixture
    def shl(self, store: LockStore) -> ShareLab:
        if not kinds.of(store).shares:
            pytest.skip("this store's kind holds no shares")
        return ShareLab(store)

    def test_a_share_says_what_its_group_replaced_and_a_join_says_the_same(self, shl):
        name = shl.name()
        first, _ = shl.take(name, lease=1000, owner="a")
        _, starts = shl.share(name, at=1000 + SKEW + 1, owner="r1")
        said = previous_of(shl, name, starts)
        assert (said.how, said.lease_id, said.owner) == (EXPIRED, first, "a")
        _, joins = shl.share(name, at=1000 + SKEW + 2, owner="r2")
        assert previous_of(shl, name, joins) == said

    def test_a_group_whose_every_share_was_released_says_released(self, shl):
        name = shl.name()
        one, _ = shl.share(name, owner="r1")
        two, _ = shl.share(name, at=1, owner="r2")
        assert shl.release(name, one, at=10).applied
        assert shl.release(name, two, at=11).applied
        _, outcome = shl.take(name, at=20, owner="w")
        assert previous_of(shl, name, outcome) == Previous(RELEASED)

    def test_a_share_that_ran_out_is_named_though_the_last_share_was_released(self, shl):
        name = shl.name()
        dead, _ = shl.share(name, lease=1000, owner="r1")
        live, _ = shl.share(name, at=1, lease=MINUTE, owner="r2")
        ran_out = shl.share_of(name, dead)
        assert ran_out is not None
        assert shl.release(name, live, at=1000 + SKEW + 1).applied
        _, outcome = shl.take(name, at=1000 + SKEW + 2, owner="w")
        said = previous_of(shl, name, outcome)
        assert (said.how, said.lease_id, said.owner, said.host) == (EXPIRED, dead, "r1", "r1-host")
        assert said.ended_at == ran_out.expires_at

    def test_a_share_that_ran_out_and_left_on_a_join_is_still_named(self, shl):
        name = shl.name()
        dead, _ = shl.share(name, lease=1000, owner="r1")
        live, _ = shl.share(name, at=1, lease=MINUTE, owner="r2")
        later = 1000 + SKEW + 1
        joiner, joined = shl.share_seen(name, shl.record(name), at=later)
        assert joined.applied and shl.share_of(name, dead) is None
        assert shl.release(name, live, at=later + 1).applied
        assert shl.release(name, joiner, at=later + 2).applied
        _, outcome = shl.take(name, at=later + 3, owner="w")
        said = previous_of(shl, name, outcome)
        assert (said.how, said.lease_id, said.owner) == (EXPIRED, dead, "r1")

    def test_a_share_force_released_on_its_own_is_named_with_the_operator(self, shl):
        name = shl.name()
        one, _ = shl.share(name, owner="r1")
        two, _ = shl.share(name, at=1, owner="r2")
        assert shl.force(name, one, "f1", at=10).applied
        assert shl.release(name, two, at=11).applied
        _, outcome = shl.take(name, at=20, owner="w")
        said = previous_of(shl, name, outcome)
        assert (said.how, said.lease_id, said.owner) == (FORCED, one, "r1")
        assert (said.forced_by, said.forced_reason) == ("ops", "stuck")

    def test_a_group_force_released_names_the_group_and_the_operator(self, shl):
        name = shl.name()
        shl.share(name, owner="r1")
        shl.share(name, at=1, owner="r2")
        group = shl.record(name).lease_id
        assert shl.force(name, group, "f1", at=10).applied
        _, outcome = shl.take(name, at=20, owner="w")
        said = previous_of(shl, name, outcome)
        assert (said.how, said.lease_id, said.owner, said.forced_by) == (FORCED, group, "r1", "ops")

    def test_a_new_group_after_one_that_ran_out_names_its_latest_share(self, shl):
        name = shl.name()
        shl.share(name, lease=1000, owner="r1")
        last, _ = shl.share(name, at=5, lease=1000, owner="r2")
        later = 1005 + SKEW + 1
        _, starts = shl.share_seen(name, shl.record(name), at=later)
        said = previous_of(shl, name, starts)
        assert (said.how, said.lease_id, said.owner) == (EXPIRED, last, "r2")
