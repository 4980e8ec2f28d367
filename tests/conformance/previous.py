"""The conformance suite of ``previous`` (``docs/contributing/design-remembering.md``): every grant
says exactly how the lease before it ended, in its answer and in the record read afterwards. A
store passes by subclassing ``PreviousConformance`` beside its ``StoreConformance`` (the same
``store`` fixture)."""

from __future__ import annotations

import pytest

from awsflock.protocol import LockStore, Outcome
from awsflock.records import EXPIRED, FIRST, FORCED, RELEASED, Previous
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
