"""The conformance suite of state with the lease (``awsflock.state``): a renewal with
``state`` writes it in the same step, under the renewal's condition; writes of one lease are
ordered by their stamps; the state outlives the lease and every later grant; only a plain
lock keeps one. A store passes by subclassing ``StateConformance`` beside its
``StoreConformance``."""

from __future__ import annotations

import pytest

from awsflock import errors
from awsflock.protocol import LockStore, Outcome
from awsflock.state import MAX_STATE, NO_STATE, StateWrite
from tests.conformance.suite import MINUTE, SKEW, Lab, new_id


class StateLab(Lab):
    def write(
        self,
        name: str,
        lease_id: str,
        data: bytes,
        *,
        at: int = 0,
        stamp: int | None = None,
        lease: int = MINUTE,
        slot: int | None = None,
    ) -> Outcome:
        return self.store.renew(
            name,
            lease_id,
            now_ms=self.now + at,
            lease_ms=lease,
            skew_ms=SKEW,
            slot=slot,
            state=StateWrite(data, self.now + (at if stamp is None else stamp)),
        )

    def data(self, name: str) -> bytes | None:
        return self.store.read_state(name).data


class StateConformance:
    """Every test here must pass on every store."""

    @pytest.fixture
    def sl(self, store: LockStore) -> StateLab:
        return StateLab(store)

    def test_a_lock_never_written_has_no_state(self, sl):
        assert sl.store.read_state(sl.name("never")) == NO_STATE
        name = sl.name()
        sl.take(name)
        assert sl.store.read_state(name) == NO_STATE

    def test_the_holder_writes_with_a_renewal_and_every_later_holder_reads_it(self, sl):
        name = sl.name()
        first, _ = sl.take(name, lease=4000)
        written = sl.write(name, first, b"batch=41", at=1000, lease=4000)
        assert written.applied
        assert sl.held(sl.store.read(name)).expires_at * 1000 == sl.now + 5000  # renewed too
        state = sl.store.read_state(name)
        assert (state.data, state.lease_id, state.stamp_ms) == (b"batch=41", first, sl.now + 1000)
        assert sl.release(name, first, at=2000).applied
        second, _ = sl.take(name, at=3000)
        assert sl.data(name) == b"batch=41"
        assert sl.write(name, second, b"batch=42", at=3500).applied
        # The lease after it ran out (and was taken over) reads the last write too.
        third, taken = sl.take(name, at=3500 + MINUTE + SKEW + 1)
        assert taken.applied and sl.data(name) == b"batch=42"
        assert sl.store.read_state(name).lease_id == second
        assert third

    def test_a_released_holder_cannot_write(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name)
        assert sl.write(name, lease_id, b"one", at=100).applied
        assert sl.release(name, lease_id, at=200).applied
        assert not sl.write(name, lease_id, b"stale", at=300).applied
        assert sl.data(name) == b"one"

    def test_a_force_released_holder_cannot_write(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name)
        assert sl.force(name, lease_id, new_id(), at=100).applied
        assert not sl.write(name, lease_id, b"stale", at=200).applied
        assert sl.data(name) is None

    def test_a_holder_whose_lease_ran_out_cannot_write(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name, lease=4000)
        assert not sl.write(name, lease_id, b"stale", at=4001).applied
        assert sl.data(name) is None

    def test_a_holder_taken_over_cannot_write(self, sl):
        name = sl.name()
        old, _ = sl.take(name, lease=4000)
        new, taken = sl.take(name, at=4000 + SKEW + 1)
        assert taken.applied
        assert not sl.write(name, old, b"stale", at=100).applied  # its reading before its end
        assert sl.write(name, new, b"fresh", at=4000 + SKEW + 2).applied
        assert not sl.write(name, old, b"stale", at=4000 + SKEW + 3).applied
        assert sl.data(name) == b"fresh"

    def test_a_write_that_lands_after_a_later_one_of_its_lease_is_refused(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name)
        assert sl.write(name, lease_id, b"batch=2", at=200).applied
        late = sl.write(name, lease_id, b"batch=1", at=200, stamp=100)
        assert not late.applied
        assert sl.data(name) == b"batch=2"
        # The same write again (a retry whose first try went through) applies again.
        assert sl.write(name, lease_id, b"batch=2", at=300, stamp=200).applied
        assert sl.data(name) == b"batch=2"

    def test_a_new_holder_writes_whatever_the_last_holders_stamp(self, sl):
        name = sl.name()
        first, _ = sl.take(name)
        assert sl.write(name, first, b"ahead", at=100, stamp=50_000).applied  # a clock ahead
        assert sl.release(name, first, at=200).applied
        second, _ = sl.take(name, at=300)
        assert sl.write(name, second, b"behind", at=400).applied
        assert sl.data(name) == b"behind"

    def test_a_write_never_shortens_the_lease(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name, lease=MINUTE)
        # A shorter renewal read within the skew window of the grant is refused alone...
        assert not sl.renew(name, lease_id, at=10, lease=4000).applied
        # ...and with state it is applied: the state written, the end kept.
        assert sl.write(name, lease_id, b"kept", at=10, lease=4000).applied
        assert sl.held(sl.store.read(name)).expires_at * 1000 == sl.now + MINUTE
        assert sl.data(name) == b"kept"

    def test_any_bytes_up_to_the_limit(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name)
        every = bytes(range(256)) * (MAX_STATE // 256)
        assert len(every) == MAX_STATE
        assert sl.write(name, lease_id, every, at=100).applied
        assert sl.data(name) == every
        assert sl.write(name, lease_id, b"", at=200).applied
        assert sl.data(name) == b""  # empty is a state, not none
        with pytest.raises(errors.UsageError, match="at most 4096 bytes"):
            sl.write(name, lease_id, every + b"x", at=300)
        assert sl.data(name) == b""

    def test_only_a_plain_lock_keeps_state(self, sl):
        name = sl.name()
        lease_id, _ = sl.take(name, slot=0, slots=2)
        with pytest.raises(errors.UsageError, match="not with a pool's slot"):
            sl.write(name, lease_id, b"x", at=100, slot=0)

    def test_a_write_keeps_the_max_hold(self, sl):
        import dataclasses

        from awsflock.protocol import Attempt
        from awsflock.records import Identity

        name = sl.name()
        attempt = Attempt(new_id(), Identity(owner="a"), sl.now, 4000, SKEW)
        assert sl.store.take(name, dataclasses.replace(attempt, max_hold_ms=6000)).applied
        assert sl.write(name, attempt.lease_id, b"x", at=3000, lease=4000).applied
        assert sl.held(sl.store.read(name)).expires_at * 1000 == sl.now + 6000
        assert not sl.write(name, attempt.lease_id, b"y", at=6001).applied
        assert sl.data(name) == b"x"
